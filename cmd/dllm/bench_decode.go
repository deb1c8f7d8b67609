package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v3"

	"dllm/diffusion"
	"dllm/model"
	"dllm/openai"
	"dllm/torch"
)

// benchDecodeCommand is `dllm bench decode`: the decode loop's speed, either
// of the sampler in this process or of a running server.
func benchDecodeCommand() *cli.Command {
	return &cli.Command{
		Name:  "decode",
		Usage: "decode speed: the sampler's loop over a KV cache filled to each context, or a running server",
		UsageText: `dllm bench decode (--config FILE | --model DIR) [--ctx 1k,8k,16k,32k] [--commit 1,2,4,8] [--ar] [options]
dllm bench decode --server URL [--max-tokens N] [--prompt-tokens N] [--threshold X | --tokens-per-step K] [--clients 1,8,32]`,
		Description: `In-process: for each context C, a prompt of C random tokens is prefilled,
then the diffusion sampler generates with exactly k tokens committed per
denoising forward (--commit; diffusion.Options.FixedCommit), so the forward
count, and so the speed, does not depend on the weights; --ar adds plain AR
decoding (block 1). Per point: the time per forward (median and p90 over
blocks: a block's wall time over its forwards; the commit of a block rides
on the next block's first forward), committed tokens/s, TPF, and the
bandwidth floor: the weights read
once plus the KV cache at C, at --bandwidth-gbs.

--batch B1,B2,... runs each point as B sequences decoding together
(diffusion.Batcher, as dllm serve --max-num-seqs runs them), each with its
own random prompt of C tokens: tokens/s is then all streams together,
stream_tok/s one stream's share, step_ms the time of one batched forward as
a stream sees it, fill the sequences a step held on average, and the floor
reads B KV caches.

With --server: times streamed chat completions against an OpenAI-compatible
server (dllm serve or any other): time to first token and tokens/s. With
--clients N1,N2,...: N clients at once, each sending --requests requests
back to back; a row per N: all streams' tokens/s, one stream's (median)
and the time to first token.
See docs/performance.md.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "model `DIR` with weights (its dllm.json when there is one); with --server, the model name to send"},
			&cli.StringFlag{Name: "config", Usage: "config.json (or its directory) for random weights of that shape"},
			&cli.StringFlag{Name: "device", Value: "auto", Usage: "cpu, cuda, cuda:N or auto"},
			&cli.StringFlag{Name: "dtype", Value: "bf16", Usage: "weight and compute dtype"},
			&cli.StringFlag{Name: "ctx", Value: "1k,8k,16k,32k", Usage: "comma-separated context lengths (k = 1024)"},
			&cli.IntFlag{Name: "block", Value: 32, Usage: "block size of the diffusion points"},
			&cli.StringFlag{Name: "commit", Value: "1,2,4,8", Usage: "comma-separated tokens committed per denoising forward; with --ar, only when given"},
			&cli.BoolFlag{Name: "ar", Usage: "measure AR decoding (block 1, one token per forward)"},
			&cli.StringFlag{Name: "batch", Usage: "comma-separated batch sizes: run each point as that many sequences decoding together (continuous batching; default: one sequence on the single-stream decoder)"},
			&cli.StringFlag{Name: "engine", Value: "fast", Usage: "fast (the decoder: whole forward in C++, FlashAttention and CUDA graphs on a GPU) or eager (one shim call per sublayer), to compare"},
			&cli.IntFlag{Name: "tokens", Value: 512, Usage: "timed tokens per point (whole blocks)"},
			&cli.IntFlag{Name: "warmup", Value: 96, Usage: "untimed tokens before the timed ones at each point (at least one block; the default's three blocks see every kind of forward twice, so its CUDA graphs are captured before the timing)"},
			&cli.FloatFlag{Name: "bandwidth-gbs", Value: 4300, Usage: "memory bandwidth for the floor, GB/s (H200 copy as measured: 4300; H100: 3350)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per point"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a Go CPU profile of the in-process points to `FILE` (go tool pprof): where the host's time goes"},
			// Client mode.
			&cli.StringFlag{Name: "server", Usage: "base `URL` of an OpenAI-compatible server to time instead (e.g. http://127.0.0.1:8000)"},
			&cli.IntFlag{Name: "max-tokens", Value: 256, Usage: "with --server: max_tokens per request"},
			&cli.IntFlag{Name: "prompt-tokens", Value: 64, Usage: "with --server: prompt length, about this many tokens of words"},
			&cli.FloatFlag{Name: "threshold", Usage: "with --server: dllm's threshold extension (not sent unless given)"},
			&cli.IntFlag{Name: "tokens-per-step", Usage: "with --server: dllm's tokens_per_step extension, exactly K tokens committed per denoising step (not sent unless given)"},
			&cli.FloatFlag{Name: "temperature", Usage: "with --server: sampling temperature"},
			&cli.IntFlag{Name: "requests", Value: 3, Usage: "with --server: timed requests (after one short warm-up), per client with --clients"},
			&cli.StringFlag{Name: "clients", Usage: "with --server: comma-separated numbers of concurrent streaming clients, a row each (default: one client, a row per request)"},
			&cli.BoolFlag{Name: "ignore-eos", Value: true, Usage: "with --server: send ignore_eos (vLLM's extension, which dllm serve honours too) so every request runs to max_tokens"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "with --server: limit per request"},
		}, decoderFlags()...),
		Action: benchDecode,
	}
}

func benchDecode(ctx context.Context, c *cli.Command) error {
	// Ctrl-C stops between two forwards (or requests), after the points
	// already printed.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	if c.String("server") != "" {
		return benchDecodeServer(ctx, c)
	}
	if path := c.String("cpuprofile"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	return benchDecodeLocal(ctx, c)
}

// decodeMode is one way of decoding: k tokens per denoising forward in
// blocks of block, or AR (block 1).
type decodeMode struct {
	ar     bool
	block  int
	commit int
	eager  bool // Model.Forward over a KVCache instead of the Decoder
}

func (m decodeMode) String() string {
	if m.ar {
		return "ar"
	}
	return fmt.Sprintf("commit%d", m.commit)
}

// decodePoint is one measured (mode, context) pair.
type decodePoint struct {
	Device string `json:"device"`
	DType  string `json:"dtype"`
	Mode   string `json:"mode"`   // "ar" or "commitK"
	Engine string `json:"engine"` // "fast" (the Decoder) or "eager"
	Block  int    `json:"block"`
	// Batch is the sequences decoding together (0: the single-stream
	// decoder, not the batcher).
	Batch    int `json:"batch"`
	Commit   int `json:"commit"` // tokens per denoising forward (1 for AR)
	Context  int `json:"context"`
	Tokens   int `json:"tokens"`   // committed in the timed blocks
	Forwards int `json:"forwards"` // in the timed blocks, commit forwards included (AR: one per token)
	// StepMedianMS and StepP90MS are over the timed blocks of each block's
	// wall time divided by its forwards.
	StepMedianMS float64 `json:"step_median_ms"`
	StepP90MS    float64 `json:"step_p90_ms"`
	TokPerSec    float64 `json:"tokens_per_s"` // Tokens / their wall time (all streams)
	// StreamTokPerSec is one stream's share of TokPerSec.
	StreamTokPerSec float64 `json:"stream_tokens_per_s"`
	TPF             float64 `json:"tpf"` // Tokens / Forwards
	// HostMS is the host time inside the decoder's forwards, per forward
	// (0 on the eager engine): on a GPU the time to enqueue one. Close to
	// StepMedianMS means the CPU sets the pace, not the GPU. With --batch
	// above 1 it is the host's turn between two batched steps instead (the
	// sequences reading their picks and asking for the next forward),
	// when the device waits: the timed wall time less the time inside
	// the steps (diffusion.BatchStats), per step.
	HostMS float64 `json:"host_ms"`
	// With --batch: BatchFill is the sequences a timed step held on average
	// (diffusion.BatchStats: sequence forwards over steps), GatherWaits the
	// timed steps that ran only after waiting the batcher's longest for a
	// sequence that was late (each waits 5 ms).
	BatchFill   float64 `json:"batch_fill,omitempty"`
	GatherWaits int64   `json:"gather_waits,omitempty"`
	// FloorMS is the time one forward needs to read the weights and the KV
	// cache at Context once at BandwidthGBs; VsFloor = StepMedianMS / FloorMS.
	FloorMS      float64 `json:"floor_ms"`
	VsFloor      float64 `json:"vs_floor"`
	BandwidthGBs float64 `json:"bandwidth_gbs"`
	PrefillMS    float64 `json:"prefill_ms"`
}

func benchDecodeLocal(ctx context.Context, c *cli.Command) error {
	// 1. Everything that can fail before weights are made.
	ctxs, err := parseSizes(c.String("ctx"))
	if err != nil {
		return fmt.Errorf("--ctx: %w", err)
	}
	modes, err := decodeModes(c)
	if err != nil {
		return err
	}
	batches := []int{0}
	if c.IsSet("batch") {
		if batches, err = parseInts(c.String("batch")); err != nil {
			return fmt.Errorf("--batch: %w", err)
		}
	}
	tokens, warmup, bw := c.Int("tokens"), c.Int("warmup"), c.Float("bandwidth-gbs")
	switch {
	case tokens < 1:
		return fmt.Errorf("--tokens %d must be at least 1", tokens)
	case warmup < 0:
		return fmt.Errorf("--warmup %d is negative", warmup)
	case !(bw > 0):
		return fmt.Errorf("--bandwidth-gbs %v must be positive", bw)
	}
	dev, dt, err := placement(c.String("device"), c.String("dtype"))
	if err != nil {
		return err
	}
	m, settings, err := benchDecodeModel(c, dev, dt)
	if err != nil {
		return err
	}
	defer m.Free()
	cfg := m.Config
	generated := 0
	for _, md := range modes {
		generated = max(generated, decodePlan(md, tokens, warmup).total)
	}
	if C := slices.Max(ctxs); C+generated > cfg.MaxPositionEmbeddings {
		return fmt.Errorf("context %d plus %d generated tokens exceeds the model's max_position_embeddings of %d",
			C, generated, cfg.MaxPositionEmbeddings)
	}
	weightBytes, kvPerToken := benchWeightBytes(cfg, dt), cfg.KVBytesPerToken(dt.Size())
	w := c.Root().Writer
	if !c.Bool("json") {
		fmt.Fprintf(w, "# %d layers, hidden %d, vocab %d, %s on %s: %.4g GB of weights read per forward, KV %.4g kB/token; floor at %.0f GB/s\n",
			cfg.NumHiddenLayers, cfg.HiddenSize, cfg.VocabSize, dt, dev, float64(weightBytes)/1e9, float64(kvPerToken)/1e3, bw)
		fmt.Fprintf(w, "%-8s %5s %5s %5s %8s %6s %6s %8s %8s %8s %8s %9s %9s %10s %7s\n",
			"mode", "batch", "fill", "block", "context", "tokens", "fwds", "TPF", "step_ms", "p90_ms", "host_ms", "tokens/s", "stream/s", "floor_ms", "x_floor")
	}
	// 2. One short generation first: the first in a process runs 3-4x
	// slower per step on a GPU (docs/performance.md), which would land on
	// the first point.
	rng := rand.New(rand.NewPCG(1, 2))
	if _, err := runDecodePoint(ctx, m, settings, modes[0], randomPrompt(rng, min(ctxs[0], 64), cfg.VocabSize, settings), 1, 1); err != nil {
		return err
	}
	// 3. The points, each printed as soon as it is measured so that a run
	// cut short keeps what it finished.
	for _, C := range ctxs {
		var prompts [][]int64 // one per stream
		for range max(slices.Max(batches), 1) {
			prompts = append(prompts, randomPrompt(rng, C, cfg.VocabSize, settings))
		}
		for _, md := range modes {
			for _, B := range batches {
				pl := decodePlan(md, tokens, warmup)
				var r *decodeRun
				if B == 0 {
					r, err = runDecodePoint(ctx, m, settings, md, prompts[0], pl.warmBlocks, pl.timedBlocks)
				} else {
					r, err = runDecodeBatch(ctx, m, settings, md, prompts[:B], pl.warmBlocks, pl.timedBlocks)
				}
				if err != nil {
					return fmt.Errorf("%s at context %d, batch %d: %w", md, C, B, err)
				}
				p := r.point(dev, dt, md, C)
				p.Batch, p.BandwidthGBs = B, bw
				p.FloorMS = float64(weightBytes+int64(max(B, 1))*int64(C)*kvPerToken) / (bw * 1e9) * 1e3
				p.VsFloor = p.StepMedianMS / p.FloorMS
				if B > 0 {
					p.Engine, p.StreamTokPerSec = "batch", p.TokPerSec/float64(B)
				} else {
					p.StreamTokPerSec = p.TokPerSec
				}
				if c.Bool("json") {
					if err := json.NewEncoder(w).Encode(p); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(w, "%-8s %5d %5.1f %5d %8d %6d %6d %8.2f %8.2f %8.2f %8.2f %9.1f %9.1f %10.4g %7.1f\n",
					p.Mode, max(B, 1), max(p.BatchFill, 1), p.Block, p.Context, p.Tokens, p.Forwards, p.TPF, p.StepMedianMS, p.StepP90MS,
					p.HostMS, p.TokPerSec, p.StreamTokPerSec, p.FloorMS, p.VsFloor)
			}
		}
	}
	return nil
}

// decodeModes reads --commit and --ar: the commit counts, then AR. --ar
// alone measures only AR, since --commit has a default.
func decodeModes(c *cli.Command) ([]decodeMode, error) {
	block := c.Int("block")
	if block < 1 {
		return nil, fmt.Errorf("--block %d must be at least 1", block)
	}
	var eager bool
	switch e := c.String("engine"); e {
	case "fast":
	case "eager":
		eager = true
	default:
		return nil, fmt.Errorf("--engine %q: want fast or eager", e)
	}
	var modes []decodeMode
	if !c.Bool("ar") || c.IsSet("commit") {
		ks, err := parseInts(c.String("commit"))
		if err != nil {
			return nil, fmt.Errorf("--commit: %w", err)
		}
		for _, k := range ks {
			if k > block {
				return nil, fmt.Errorf("--commit %d is more than the block of %d", k, block)
			}
			modes = append(modes, decodeMode{block: block, commit: k, eager: eager})
		}
	}
	if c.Bool("ar") {
		modes = append(modes, decodeMode{ar: true, block: 1, commit: 1, eager: eager})
	}
	return modes, nil
}

// plannedDecode is how a point splits its tokens into whole blocks.
type plannedDecode struct {
	warmBlocks, timedBlocks int
	total                   int // tokens generated
}

func decodePlan(md decodeMode, tokens, warmup int) plannedDecode {
	// The first block's time includes the prefill, so at least one block
	// is always warm-up.
	p := plannedDecode{warmBlocks: max(1, ceilDiv(warmup, md.block)), timedBlocks: ceilDiv(tokens, md.block)}
	p.total = (p.warmBlocks + p.timedBlocks) * md.block
	return p
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// benchDecodeModel loads --model or makes random weights of --config's
// shape, with the settings to run them by: dllm.json when the model
// directory has one, else a stand-in (the last embedding row as the mask,
// the shift, as configs/minicpm5-2b.yaml converts), since a forward costs the
// same whatever the weights and the mask id are.
func benchDecodeModel(c *cli.Command, dev torch.Device, dt torch.DType) (*model.Model, *diffusion.Settings, error) {
	var (
		m   *model.Model
		st  *diffusion.Settings
		err error
	)
	switch dir := c.String("model"); {
	case dir != "" && c.String("config") != "":
		return nil, nil, fmt.Errorf("give --model DIR or --config FILE, not both")
	case dir != "":
		if _, serr := os.Stat(filepath.Join(dir, diffusion.SettingsFile)); serr == nil {
			if st, err = diffusion.LoadSettings(dir); err != nil {
				return nil, nil, err
			}
		} else if !errors.Is(serr, fs.ErrNotExist) {
			return nil, nil, serr
		}
		m, err = model.Load(dir, model.LoadOptions{Device: dev, DType: dt, NoNormFold: c.Bool("no-norm-fold"), NoPersistentKernel: c.Bool("no-persistent-kernel")})
	case c.String("config") != "":
		var cfg *model.Config
		if cfg, err = model.LoadConfig(c.String("config")); err == nil {
			m, err = model.NewRandom(cfg, model.LoadOptions{Device: dev, DType: dt, NoNormFold: c.Bool("no-norm-fold"), NoPersistentKernel: c.Bool("no-persistent-kernel")}, 0, 0.02)
		}
	default:
		return nil, nil, fmt.Errorf("give --model DIR or --config FILE (or --server URL)")
	}
	if err != nil {
		return nil, nil, err
	}
	if st == nil {
		st = diffusion.NewSettings(m.Config.VocabSize-1, diffusion.DefaultMaskToken, c.Int("block"), true)
	}
	if err := st.Validate(m.Config.VocabSize); err != nil {
		m.Free()
		return nil, nil, err
	}
	return m, st, nil
}

// benchWeightBytes is what one forward reads of the weights: all of them
// except the embedding table, of which it reads only the rows of its
// tokens (unless the head shares it).
func benchWeightBytes(cfg *model.Config, dt torch.DType) int64 {
	n := cfg.NumParams()
	if !cfg.TieWordEmbeddings {
		n -= int64(cfg.VocabSize) * int64(cfg.HiddenSize)
	}
	return n * int64(dt.Size())
}

// randomPrompt is n token ids drawn uniformly, never the mask.
func randomPrompt(rng *rand.Rand, n, vocab int, st *diffusion.Settings) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		for {
			ids[i] = rng.Int64N(int64(vocab))
			if ids[i] != int64(st.MaskTokenID) {
				break
			}
		}
	}
	return ids
}

// decodeRun is what one generation measured over its timed blocks.
type decodeRun struct {
	stepMS   []float64 // per block: wall time / forwards
	tokens   int
	forwards int
	wall     time.Duration
	host     time.Duration // of the timed forwards: Sampler.HostTime
	turnMS   float64       // with --batch, the host's turn a step (decodePoint.HostMS)
	fill     float64       // with --batch, decodePoint.BatchFill
	waits    int64         // with --batch, decodePoint.GatherWaits
	prefill  time.Duration
}

// runDecodePoint generates warm+timed blocks after prompt in mode md and
// times the timed ones. A block's time runs from the previous block's
// callback to its own: the forward that committed the previous block and
// its own denoising forwards, which is what Block.Steps counts. Every
// denoising step copies its picks to the host, so on a GPU the callback
// comes after the work has finished.
func runDecodePoint(ctx context.Context, m *model.Model, st *diffusion.Settings, md decodeMode, prompt []int64, warm, timed int) (*decodeRun, error) {
	s := diffusion.NewSampler(m, st)
	o := diffusion.Options{BlockSize: md.block, FixedCommit: md.commit, MaxNewTokens: (warm + timed) * md.block,
		ContextLimit: len(prompt) + (warm+timed)*md.block, TopP: 1}
	if md.ar {
		s = diffusion.NewSampler(m, diffusion.ARSettings())
		o.FixedCommit, o.Threshold = 0, 1
	}
	s.Eager = md.eager
	defer s.Close()
	// The decoder and its long contexts' graphs made before the clock
	// runs, as a server makes them while loading.
	if err := s.Reserve(o.ContextLimit, md.block); err != nil {
		return nil, err
	}
	k := &blockClock{warm: warm, host: s.HostTime, last: time.Now()}
	res, err := s.Generate(ctx, prompt, o, k.onBlock)
	if err != nil {
		return nil, err
	}
	if err := k.check(md, warm, timed, res); err != nil {
		return nil, err
	}
	k.run.prefill = res.Prefill
	return &k.run, nil
}

// blockClock times a generation's blocks after its first warm ones (its
// onBlock). A block's time runs from the previous block's callback to its
// own: the forward that committed the previous block and its own
// denoising forwards, which is what Block.Steps counts. Every denoising
// step copies its picks to the host, so on a GPU the callback comes after
// the work has finished.
type blockClock struct {
	warm     int
	host     func() time.Duration // host time in the forwards so far; nil: none
	atWarm   func()               // called once the warm blocks are done; nil: none
	run      decodeRun
	last     time.Time
	lastHost time.Duration
	block    int
}

func (k *blockClock) onBlock(b diffusion.Block) (bool, error) {
	if k.block == k.warm-1 && k.atWarm != nil {
		k.atWarm()
	}
	now := time.Now()
	var host time.Duration
	if k.host != nil {
		host = k.host()
	}
	if k.block >= k.warm {
		dt := now.Sub(k.last)
		k.run.wall += dt
		k.run.host += host - k.lastHost
		k.run.tokens += len(b.IDs)
		k.run.forwards += b.Steps
		k.run.stepMS = append(k.run.stepMS, float64(dt)/float64(time.Millisecond)/float64(max(b.Steps, 1)))
	}
	k.last, k.lastHost = now, host
	k.block++
	return false, nil
}

// check fails a generation that did not run warm+timed whole blocks.
func (k *blockClock) check(md decodeMode, warm, timed int, res *diffusion.Result) error {
	if k.block != warm+timed || k.run.tokens != timed*md.block {
		// Only a stop token could end it early, and none is set.
		return fmt.Errorf("generated %d blocks (%d timed tokens), expected %d (%d): finish %s",
			k.block, k.run.tokens, warm+timed, timed*md.block, res.FinishReason)
	}
	return nil
}

// runDecodeBatch is runDecodePoint for len(prompts) sequences decoding
// together through a Batcher. The timed blocks start together: each
// sequence, its warm blocks done, waits for the others, so that no timed
// step also carries another's prefill. Tokens/s is every stream's timed
// tokens over the time from that start to the last one's end.
func runDecodeBatch(ctx context.Context, m *model.Model, st *diffusion.Settings, md decodeMode, prompts [][]int64, warm, timed int) (*decodeRun, error) {
	n := (warm + timed) * md.block
	o := diffusion.Options{BlockSize: md.block, FixedCommit: md.commit, MaxNewTokens: n, ContextLimit: len(prompts[0]) + n, TopP: 1}
	if md.ar {
		st = diffusion.ARSettings()
		o.FixedCommit, o.Threshold = 0, 1
	}
	if md.eager {
		return nil, fmt.Errorf("--batch runs on the decoder, not --engine eager")
	}
	b, err := diffusion.NewBatcher(m, st, diffusion.BatchConfig{Seqs: len(prompts), Context: o.ContextLimit})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	// As the server does while loading: a lone sequence's graphs over the
	// whole context, so that no timed step captures one.
	if err := b.Reserve(md.block); err != nil {
		return nil, err
	}
	// A sequence that fails cancels the others, which may be waiting for
	// it at the start line.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		arrived int
		start   time.Time
		at      diffusion.BatchStats // at start
		go1     = make(chan struct{})
	)
	atWarm := func() {
		mu.Lock()
		arrived++
		if arrived == len(prompts) {
			start, at = time.Now(), b.Stats()
			close(go1)
		}
		mu.Unlock()
		select {
		case <-go1:
		case <-ctx.Done():
		}
	}
	clocks := make([]*blockClock, len(prompts))
	results := make([]*diffusion.Result, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		clocks[i] = &blockClock{warm: warm, atWarm: atWarm}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if results[i], errs[i] = b.Generate(ctx, p, o, clocks[i].onBlock); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	done, stats := time.Now(), b.Stats()
	for _, err := range errs {
		// The first error that is not the cancel it caused.
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	r := &decodeRun{}
	if steps := stats.Steps - at.Steps; steps > 0 && len(prompts) > 1 {
		r.turnMS = float64((done.Sub(start) - (stats.StepTime - at.StepTime)).Microseconds()) / 1000 / float64(steps)
		r.fill = float64(stats.SeqForwards-at.SeqForwards) / float64(steps)
		r.waits = stats.GatherTimeouts - at.GatherTimeouts
	}
	var end time.Time
	for i, k := range clocks {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if err := k.check(md, warm, timed, results[i]); err != nil {
			return nil, err
		}
		r.stepMS = append(r.stepMS, k.run.stepMS...)
		r.tokens += k.run.tokens
		r.forwards += k.run.forwards
		r.prefill = max(r.prefill, results[i].Prefill)
		if k.last.After(end) {
			end = k.last
		}
	}
	r.wall = end.Sub(start)
	return r, nil
}

func (r *decodeRun) point(dev torch.Device, dt torch.DType, md decodeMode, C int) decodePoint {
	lat := slices.Clone(r.stepMS)
	slices.Sort(lat)
	engine := "fast"
	if md.eager {
		engine = "eager"
	}
	p := decodePoint{Device: dev.String(), DType: dt.String(), Mode: md.String(), Engine: engine, Block: md.block, Commit: md.commit,
		Context: C, Tokens: r.tokens, Forwards: r.forwards,
		StepMedianMS: lat[len(lat)/2], StepP90MS: lat[len(lat)*9/10],
		PrefillMS: float64(r.prefill.Microseconds()) / 1000}
	if r.wall > 0 {
		p.TokPerSec = float64(r.tokens) / r.wall.Seconds()
	}
	if r.forwards > 0 {
		p.TPF = float64(r.tokens) / float64(r.forwards)
		p.HostMS = float64(r.host.Microseconds()) / 1000 / float64(r.forwards)
	}
	p.BatchFill, p.GatherWaits = r.fill, r.waits
	if r.turnMS > 0 {
		p.HostMS = r.turnMS
	}
	return p
}

// parseSizes reads "1k,8k,100" into positive integers; k is 1024.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		num, mult := strings.TrimSpace(f), 1
		if n, ok := strings.CutSuffix(strings.ToLower(num), "k"); ok {
			num, mult = n, 1024
		}
		v, err := strconv.Atoi(num)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad size %q in %q (want e.g. 512 or 8k)", f, s)
		}
		out = append(out, v*mult)
	}
	return out, nil
}

// serverRequest is one timed chat completion against --server.
type serverRequest struct {
	Kind             string `json:"kind"` // "request" or, for the medians, "summary"
	Server           string `json:"server"`
	Model            string `json:"model,omitempty"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	// Counted is "usage" when the server reported usage, else "chunks":
	// one token per streamed chunk with text, as servers that stream token
	// by token send them.
	Counted   string  `json:"counted"`
	Chunks    int     `json:"chunks"` // streamed chunks that carried text
	TTFTMS    float64 `json:"ttft_ms"`
	TotalMS   float64 `json:"total_ms"`
	TokPerSec float64 `json:"tokens_per_s"` // completion tokens / total time
	Finish    string  `json:"finish_reason,omitempty"`
}

func benchDecodeServer(ctx context.Context, c *cli.Command) error {
	api, err := openai.New(c.String("server"))
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	switch {
	case c.Int("max-tokens") < 1:
		return fmt.Errorf("--max-tokens %d must be at least 1", c.Int("max-tokens"))
	case c.Int("prompt-tokens") < 1:
		return fmt.Errorf("--prompt-tokens %d must be at least 1", c.Int("prompt-tokens"))
	case c.Int("requests") < 1:
		return fmt.Errorf("--requests %d must be at least 1", c.Int("requests"))
	}
	api.HTTP.Timeout = c.Duration("timeout")
	name := c.String("model")
	if name == "" {
		// vLLM and others refuse a request for a model they do not serve;
		// dllm serves whatever it is asked for, and a server that lists
		// none is asked without a name.
		models, err := api.Models(ctx)
		if openai.Unreachable(err) {
			return err
		}
		if len(models) > 0 {
			name = models[0].ID
		}
	}
	temp := c.Float("temperature")
	req := &openai.ChatRequest{Model: name, MaxTokens: c.Int("max-tokens"), Temperature: &temp,
		Messages:      openai.Messages(openai.Message{Role: "user", Content: benchPromptText(c.Int("prompt-tokens"))}),
		StreamOptions: &openai.StreamOptions{IncludeUsage: true}, Extra: map[string]any{}}
	if c.IsSet("tokens-per-step") {
		req.Extra["tokens_per_step"] = c.Int("tokens-per-step")
	}
	if c.IsSet("threshold") {
		req.Extra["threshold"] = c.Float("threshold")
	}
	if c.Bool("ignore-eos") {
		req.Extra["ignore_eos"] = true
	}
	// One short request first: the server's first request may pay for
	// warm-ups of its own.
	warm := *req
	warm.MaxTokens = 8
	if _, err := timeChat(ctx, api, &warm); err != nil {
		return err
	}
	w := c.Root().Writer
	if c.IsSet("clients") {
		return benchServerClients(ctx, c, api, req, name)
	}
	if !c.Bool("json") {
		fmt.Fprintf(w, "%-8s %7s %7s %7s %10s %10s %9s\n", "request", "prompt", "tokens", "chunks", "ttft_ms", "total_ms", "tokens/s")
	}
	var all []serverRequest
	for i := range c.Int("requests") {
		r, err := timeChat(ctx, api, req)
		if err != nil {
			return fmt.Errorf("request %d: %w", i+1, err)
		}
		r.Server, r.Model = strings.TrimSuffix(api.Base, "/v1"), name
		all = append(all, *r)
		if c.Bool("json") {
			if err := json.NewEncoder(w).Encode(r); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(w, "%-8d %7d %7d %7d %10.1f %10.1f %9.1f\n", i+1, r.PromptTokens, r.CompletionTokens, r.Chunks, r.TTFTMS, r.TotalMS, r.TokPerSec)
		}
	}
	s := summarise(all)
	if c.Bool("json") {
		return json.NewEncoder(w).Encode(s)
	}
	fmt.Fprintf(w, "%-8s %7d %7d %7d %10.1f %10.1f %9.1f   (medians; tokens counted from %s)\n",
		"median", s.PromptTokens, s.CompletionTokens, s.Chunks, s.TTFTMS, s.TotalMS, s.TokPerSec, s.Counted)
	return nil
}

// serverLoad is one --clients point against --server.
type serverLoad struct {
	Kind     string `json:"kind"` // "clients"
	Server   string `json:"server"`
	Model    string `json:"model,omitempty"`
	Clients  int    `json:"clients"`
	Requests int    `json:"requests"`
	Tokens   int    `json:"tokens"` // completion tokens of all requests
	// TokPerSec is Tokens over the wall time of the whole point;
	// StreamTokPerSec and TTFTMS are the requests' medians.
	TokPerSec       float64 `json:"tokens_per_s"`
	StreamTokPerSec float64 `json:"stream_tokens_per_s"`
	TTFTMS          float64 `json:"ttft_ms"`
	WallS           float64 `json:"wall_s"`
}

// benchServerClients runs --clients: for each N, N streaming clients at
// once, each sending --requests requests one after another.
func benchServerClients(ctx context.Context, c *cli.Command, api *openai.Client, req *openai.ChatRequest, name string) error {
	counts, err := parseInts(c.String("clients"))
	if err != nil {
		return fmt.Errorf("--clients: %w", err)
	}
	w := c.Root().Writer
	if !c.Bool("json") {
		fmt.Fprintf(w, "%-8s %8s %8s %10s %10s %10s %9s\n", "clients", "requests", "tokens", "tokens/s", "stream/s", "ttft_ms", "wall_s")
	}
	// The clients share the transport: a kept connection for each.
	api.HTTP.Transport = &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: slices.Max(counts)}
	for _, n := range counts {
		var (
			mu   sync.Mutex
			all  []serverRequest
			errs []error
			wg   sync.WaitGroup
		)
		start := time.Now()
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range c.Int("requests") {
					r, err := timeChat(ctx, api, req)
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else {
						all = append(all, *r)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
		wall := time.Since(start)
		if len(errs) > 0 {
			return fmt.Errorf("%d clients: %d requests failed, the first: %w", n, len(errs), errs[0])
		}
		s := summarise(all)
		p := serverLoad{Kind: "clients", Server: strings.TrimSuffix(api.Base, "/v1"), Model: name, Clients: n, Requests: len(all),
			StreamTokPerSec: s.TokPerSec, TTFTMS: s.TTFTMS, WallS: wall.Seconds()}
		for _, r := range all {
			p.Tokens += r.CompletionTokens
		}
		p.TokPerSec = float64(p.Tokens) / wall.Seconds()
		if c.Bool("json") {
			if err := json.NewEncoder(w).Encode(p); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(w, "%-8d %8d %8d %10.1f %10.1f %10.1f %9.2f\n", p.Clients, p.Requests, p.Tokens, p.TokPerSec, p.StreamTokPerSec, p.TTFTMS, p.WallS)
	}
	return nil
}

// summarise is the per-field median of the requests.
func summarise(rs []serverRequest) serverRequest {
	med := func(f func(serverRequest) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return serverRequest{Kind: "summary", Server: rs[0].Server, Model: rs[0].Model, Counted: rs[0].Counted,
		PromptTokens:     int(med(func(r serverRequest) float64 { return float64(r.PromptTokens) })),
		CompletionTokens: int(med(func(r serverRequest) float64 { return float64(r.CompletionTokens) })),
		Chunks:           int(med(func(r serverRequest) float64 { return float64(r.Chunks) })),
		TTFTMS:           med(func(r serverRequest) float64 { return r.TTFTMS }),
		TotalMS:          med(func(r serverRequest) float64 { return r.TotalMS }),
		TokPerSec:        med(func(r serverRequest) float64 { return r.TokPerSec }),
	}
}

// timeChat sends one streamed chat completion and times it: the first
// token is the first chunk that carries text (content or reasoning).
func timeChat(ctx context.Context, api *openai.Client, req *openai.ChatRequest) (*serverRequest, error) {
	r := &serverRequest{Kind: "request", Counted: "chunks"}
	var first time.Duration
	start := time.Now()
	err := api.Stream(ctx, req, func(ch *openai.Chunk) error {
		for _, c := range ch.Choices {
			if d := c.Delta; d.Content != "" || d.ReasoningContent != "" || d.Reasoning != "" {
				if r.Chunks == 0 {
					first = time.Since(start)
				}
				r.Chunks++
			}
			if c.FinishReason != nil {
				r.Finish = *c.FinishReason
			}
		}
		if ch.Usage != nil {
			r.PromptTokens, r.CompletionTokens, r.Counted = ch.Usage.PromptTokens, ch.Usage.CompletionTokens, "usage"
		}
		return nil
	})
	total := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if r.Counted == "chunks" {
		r.CompletionTokens = r.Chunks
	}
	r.TTFTMS = float64(first.Microseconds()) / 1000
	r.TotalMS = float64(total.Microseconds()) / 1000
	r.TokPerSec = float64(r.CompletionTokens) / total.Seconds()
	return r, nil
}

// benchWords make benchmark prompts: common English words, about one token
// each with their leading space in the usual BPE vocabularies.
var benchWords = strings.Fields(`the of and to in is that for it as was with be by on not he this are or his
from at which but have an they you were her she there been one all we their has would when if so no will
can more other time some what about into them these may only its first new any my now such like our over
man me even most made after also did many before must through back years where much your way well down
should because each just those people how too little state good very make world still own see men work
long get here between both life being under never day same another know while last might us great old year`)

// benchPromptText is a prompt of about n tokens: a request to continue,
// then words drawn from benchWords (the same for every run).
func benchPromptText(n int) string {
	rng := rand.New(rand.NewPCG(3, 4))
	var b strings.Builder
	b.WriteString("Continue this text:")
	for range max(n-5, 1) {
		b.WriteByte(' ')
		b.WriteString(benchWords[rng.IntN(len(benchWords))])
	}
	return b.String()
}
