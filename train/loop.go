package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"dllm/diffusion"
	"dllm/model"
	"dllm/tokenizer"
	"dllm/torch"
)

// Options are the parts of a run that are not the recipe.
type Options struct {
	// Resume continues from the newest valid checkpoint in out/checkpoints.
	Resume bool
	// Log receives progress and messages; nil discards them. Terminal draws
	// a progress bar instead of periodic lines.
	Log      io.Writer
	Terminal bool
	// CreatedBy is recorded in exported models ("dllm <version>").
	CreatedBy string
	// Train and Eval, when set, replace the configured data (tests, toy
	// runs); the trainer closes neither.
	Train, Eval Source
	// Dist, when set, makes this process one rank of a data-parallel job
	// (train/dist.go).
	Dist *Dist

	// afterStep, when set, is called after each optimizer step (tests).
	afterStep func(step int)
}

// Result summarises a finished run.
type Result struct {
	State State
	// Losses are the training losses of the steps this run took.
	Losses []float64
	// EvalLoss is the last eval loss, NaN when there was no eval.
	EvalLoss float64
	// Checkpoint is the newest checkpoint; Export the exported model
	// directory ("" when export is off).
	Checkpoint, Export string
}

// trainer is one run's state.
type trainer struct {
	cfg  Config
	o    Options
	dev  torch.Device
	net  *net
	opts [2]*torch.AdamW // weight-decayed 2-d weights, the rest
	all  []*torch.Tensor // every master weight
	// params names them (checkpoints).
	params []namedParam

	settings    *diffusion.Settings
	settingsRaw []byte
	modelConfig []byte
	flops       flopsModel

	train, eval Source
	closers     []io.Closer
	loader      *loader
	seqLen      int

	pcg   *rand.PCG
	rng   *rand.Rand
	state State

	group *torch.Group // data-parallel ranks; nil alone

	baseKey  string
	base     *torch.Tensor
	rep      *reporter
	metrics  *metricsLog
	tok      *tokenizer.Tokenizer
	lastCkpt string
}

// Run trains as cfg says and returns when the last step is done (or ctx is
// cancelled: the step in progress finishes and is checkpointed first).
func Run(ctx context.Context, cfg Config, o Options) (res *Result, err error) {
	t, err := newTrainer(cfg, o)
	if err != nil {
		return nil, err
	}
	defer t.close()
	return t.run(ctx)
}

func (t *trainer) warn(msg string) {
	if t.rep != nil {
		t.rep.printf("warning: %s", msg)
	} else if t.o.Log != nil {
		fmt.Fprintf(t.o.Log, "train: warning: %s\n", msg)
	}
}

func (t *trainer) logf(format string, args ...any) {
	if t.rep != nil {
		t.rep.printf(format, args...)
	} else if t.o.Log != nil {
		fmt.Fprintf(t.o.Log, "train: "+format+"\n", args...)
	}
}

// newTrainer resolves the config, loads the model (from the newest
// checkpoint when resuming), the optimizer state and the data.
func newTrainer(cfg Config, o Options) (_ *trainer, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := torch.Load(); err != nil {
		return nil, err
	}
	t := &trainer{cfg: cfg, o: o}
	defer func() { // after Recover (deferred below) has set err
		if err != nil {
			t.close()
		}
	}()
	defer torch.Recover(&err)
	// 0. Data directories first: refusing incomplete data must not wait
	// for the model to load.
	if err := t.openDirs(); err != nil {
		return nil, err
	}
	// 1. Device and precision.
	if t.dev, err = resolveDevice(cfg.Device); err != nil {
		return nil, err
	}
	if err := t.join(); err != nil {
		return nil, err
	}
	if cfg.Threads > 0 && !t.dev.CUDA {
		torch.SetNumThreads(cfg.Threads)
	}
	dtype := torch.Float32
	if cfg.DType == "bf16" || (cfg.DType == "auto" && t.dev.CUDA) {
		dtype = torch.BFloat16
	}
	t.cfg.DType = dtype.String()
	// 2. and 3. Checkpoints, model config and diffusion settings: rank 0
	// looks, the other ranks follow it.
	var resumeDir string
	var leadErr error
	if t.leads() {
		resumeDir, leadErr = t.start()
	}
	resuming, err := t.follow(resumeDir != "", leadErr)
	if err != nil {
		return nil, err
	}
	mcfg, err := model.ParseConfig(t.modelConfig)
	if err != nil {
		return nil, fmt.Errorf("train: model config: %w", err)
	}
	if err := t.settings.Validate(mcfg.VocabSize); err != nil {
		return nil, err
	}
	// 4. Master weights in float32: the checkpoint's, the model's or random.
	lo := model.LoadOptions{Device: t.dev, DType: torch.Float32}
	var m *model.Model
	switch {
	case !t.leads():
		m, err = model.NewRandom(mcfg, lo, cfg.Seed, 0.02) // replaced by rank 0's (syncWeights)
	case resumeDir != "":
		m, err = model.Load(resumeDir, lo)
	case cfg.Init == InitRandom:
		m, err = model.NewRandom(mcfg, lo, cfg.Seed, 0.02)
	default:
		m, err = model.Load(cfg.Model, lo)
	}
	if err != nil {
		return nil, err
	}
	t.closers = append(t.closers, closerFunc(func() error { m.Free(); return nil }))
	t.net = newNet(m, dtype, cfg.CheckpointLayers, cfg.KeepLayers, cfg.LossChunkRows)
	t.net.conf = cfg.ConfidenceLossWeight
	if t.net.distill, err = newDistiller(&t.cfg, mcfg, t.dev, dtype); err != nil {
		return nil, err
	}
	if d := t.net.distill; d != nil {
		t.logf("distilling from %s (%s parameters, frozen): weight %g, temperature %g", d.dir, siCount(float64(d.m.Config.NumParams())), d.weight, d.temp)
	}
	t.flops = newFlopsModel(mcfg)
	t.params = namedParams(m)
	// 5. AdamW: weight decay on 2-d weights only, never on norms or biases.
	var decay, rest []*torch.Tensor
	for _, p := range t.params {
		p.t.SetRequiresGrad(true)
		t.all = append(t.all, p.t)
		if p.t.Dim() == 2 {
			decay = append(decay, p.t)
		} else {
			rest = append(rest, p.t)
		}
	}
	ac := torch.AdamWConfig{LR: cfg.LR, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay}
	t.opts[0] = torch.NewAdamW(decay, ac)
	ac.WeightDecay = 0
	t.opts[1] = torch.NewAdamW(rest, ac)
	if resumeDir != "" {
		if err := restoreMoments(resumeDir, t.params, t.opts); err != nil {
			return nil, err
		}
	}
	if resuming {
		t.opts[0].Steps, t.opts[1].Steps = t.state.AdamSteps[0], t.state.AdamSteps[1]
	}
	t.syncWeights(resuming)
	// 6. Data.
	if err := t.openData(mcfg.VocabSize); err != nil {
		return nil, err
	}
	// 7. Noise generator: fresh from the seed, or where the checkpoint left it.
	t.pcg = rand.NewPCG(cfg.Seed, 0x6e6f697365)
	if resuming {
		if err := t.pcg.UnmarshalBinary(t.state.RNG); err != nil {
			return nil, fmt.Errorf("train: checkpoint at step %d: rng state: %w", t.state.Step, err)
		}
		t.loader.pos = t.state.DataPosition
	}
	t.rng = rand.New(t.pcg)
	if !resuming && (cfg.Init == InitPretrained || fileExists(cfg.Model)) {
		// Where export finds the tokenizer; a random init may name a model
		// directory that does not exist.
		t.state.SourceModel = cfg.Model
	}
	t.state.ConfigHash = t.cfg.Hash()
	return t, nil
}

// start finds the checkpoint to resume from (a fresh run never mixes with
// an old one) and loads the model config and diffusion settings; "" when
// the run starts at step 0.
func (t *trainer) start() (resumeDir string, err error) {
	root := filepath.Join(t.cfg.Out, checkpointsDir)
	removeStaleTemps(root)
	if t.o.Resume {
		var st *State
		if resumeDir, st, err = LatestCheckpoint(root, t.warn); err != nil {
			return "", err
		}
		if resumeDir == "" {
			t.logf("no checkpoint in %s to resume from; starting at step 0", root)
		} else {
			t.state = *st
			t.lastCkpt = resumeDir
		}
	} else if dirs, err := listCheckpoints(root); err != nil {
		return "", err
	} else if len(dirs) > 0 {
		return "", fmt.Errorf("train: %s already holds checkpoints (newest %s): pass --resume to continue from it, or choose another --out", root, filepath.Base(dirs[0]))
	}
	return resumeDir, t.loadSettings(resumeDir)
}

// loadSettings reads the model config and dllm.json: from the checkpoint
// when resuming (what the run started with), else from the model directory
// (or model_config), making settings up for a model without dllm.json when
// the mask id is given.
func (t *trainer) loadSettings(resumeDir string) error {
	cfg := &t.cfg
	var err error
	if resumeDir != "" {
		if t.modelConfig, err = os.ReadFile(filepath.Join(resumeDir, modelConfigName)); err != nil {
			return fmt.Errorf("train: %w", err)
		}
		if t.settingsRaw, err = os.ReadFile(filepath.Join(resumeDir, settingsName)); err != nil {
			return fmt.Errorf("train: %w", err)
		}
		var s diffusion.Settings
		if err := jsonUnmarshal(t.settingsRaw, &s); err != nil {
			return fmt.Errorf("train: checkpoint %s: %s: %w", resumeDir, settingsName, err)
		}
		t.settings = &s
		if old, err := os.ReadFile(filepath.Join(resumeDir, trainConfigName)); err == nil {
			prev := DefaultConfig()
			if prev.parse(old) == nil {
				if d := resumeDiffs(&prev, cfg); len(d) > 0 {
					t.warn(fmt.Sprintf("the config differs from the checkpoint's: %s", strings.Join(d, ", ")))
				}
			}
		}
		return nil
	}
	mc := cfg.ModelConfig
	if mc == "" {
		mc = filepath.Join(cfg.Model, modelConfigName)
	}
	if t.modelConfig, err = os.ReadFile(mc); err != nil {
		return fmt.Errorf("train: model config: %w", err)
	}
	s, err := diffusion.LoadSettings(cfg.Model)
	switch {
	case err == nil:
	case cfg.Model != "" && !errors.Is(err, fs.ErrNotExist) && fileExists(filepath.Join(cfg.Model, diffusion.SettingsFile)):
		return err // present but bad
	case cfg.MaskTokenID >= 0 || cfg.Init == InitRandom:
		mcfg, perr := model.ParseConfig(t.modelConfig)
		if perr != nil {
			return fmt.Errorf("train: model config: %w", perr)
		}
		id := cfg.MaskTokenID
		if id < 0 {
			id = mcfg.VocabSize - 1
		}
		s = diffusion.NewSettings(id, diffusion.DefaultMaskToken, cfg.FinalBlockSize(), cfg.Shift)
	default:
		return fmt.Errorf("train: %w; or set mask_token_id to train an unconverted checkpoint", err)
	}
	if cfg.MaskTokenID >= 0 {
		s.MaskTokenID = cfg.MaskTokenID
	}
	// The sums describe the model directory's weights, not the ones trained
	// and checkpointed from them; Export records the sums of its own.
	s.WeightsSHA256 = nil
	t.settings = s
	t.settingsRaw, _ = jsonMarshal(s)
	return nil
}

// openDirs opens the configured data directories (training and eval),
// unless Options replace them.
func (t *trainer) openDirs() error {
	d := &t.cfg.Data
	if t.o.Train == nil && d.Train != Synthetic {
		src, err := OpenData(d.Train, d.AllowIncomplete, t.warn)
		if err != nil {
			return err
		}
		t.train = src
		t.closers = append(t.closers, src)
	}
	if t.o.Eval == nil && d.Eval != "" {
		src, err := OpenData(d.Eval, d.AllowIncomplete, t.warn)
		if err != nil {
			return err
		}
		t.eval = src
		t.closers = append(t.closers, src)
	}
	return nil
}

// openData completes the sources openDirs opened (those of Options, the
// synthetic one, hold_out) and makes the loader.
func (t *trainer) openData(vocab int) error {
	cfg := &t.cfg
	switch {
	case t.o.Train != nil:
		t.train = t.o.Train
	case cfg.Data.Train == Synthetic:
		t.train = &syntheticSource{seed: cfg.Seed, seqLen: cfg.SeqLen, vocab: vocab, avoid: int64(t.settings.MaskTokenID)}
	}
	if t.o.Eval != nil {
		t.eval = t.o.Eval
	}
	if h := cfg.Data.HoldOut; h > 0 && t.o.Eval == nil {
		n := t.train.Len()
		if h >= n {
			return fmt.Errorf("train: data.hold_out %d leaves nothing to train on (%d sequences)", h, n)
		}
		t.eval = &sliceSource{t.train, n - h, h}
		t.train = &sliceSource{t.train, 0, n - h}
	}
	t.seqLen = t.train.SeqLen()
	if cfg.SeqLen > 0 {
		if cfg.SeqLen > t.seqLen {
			return fmt.Errorf("train: seq_len %d exceeds the data's %d", cfg.SeqLen, t.seqLen)
		}
		t.seqLen = cfg.SeqLen
	}
	if t.eval != nil && t.eval.SeqLen() < t.seqLen {
		return fmt.Errorf("train: eval data has sequences of %d tokens, training uses %d", t.eval.SeqLen(), t.seqLen)
	}
	shuffle := cfg.Data.Shuffle && cfg.Data.Train != Synthetic
	t.loader = &loader{src: t.train, seqLen: t.seqLen, shuffle: shuffle, seed: cfg.Seed}
	return nil
}

func (t *trainer) close() {
	if t.net != nil {
		t.net.free()
	}
	for _, o := range t.opts {
		if o != nil {
			o.Close()
		}
	}
	t.base.Free()
	for i := len(t.closers) - 1; i >= 0; i-- {
		t.closers[i].Close()
	}
	if t.metrics != nil {
		t.metrics.close()
	}
	t.group.Close()
}

// spec is the batch layout of step s.
func (t *trainer) spec(s, bs int) batchSpec {
	c := &t.cfg
	return batchSpec{objective: c.Objective, blockSize: bs, shift: c.Shift, complementary: c.Complementary,
		tmin: c.TMin, tfloor: c.TFloor, arWeight: c.ARLossWeight, annealP: c.annealP(s), maskID: int64(t.settings.MaskTokenID)}
}

// baseMask is the objective's structural mask for block size bs, built once
// per block size: nil for mdm (bidirectional within documents).
func (t *trainer) baseMask(bs int) *torch.Tensor {
	L := t.seqLen
	key := fmt.Sprint(t.cfg.Objective, L, bs)
	if t.cfg.Objective == ObjectiveBlock && key != t.baseKey {
		t.base.Free()
		t.base, t.baseKey = tensorMask(blockLayoutMask(L, bs), 2*L, t.dev), key
	}
	if t.cfg.Objective == ObjectiveAR && t.base == nil {
		t.base = tensorMask(causalMask(L), L, t.dev)
	}
	return t.base
}

// stepStats is what one optimizer step reports.
type stepStats struct {
	loss, arLoss, gradNorm float64
	distill                float64 // the distillation part of loss
	conf                   float64 // the confidence part of loss
	flops                  float64
	tokens                 int64
}

// step takes one optimizer step: the maths of the whole method.
func (t *trainer) step() (st stepStats, err error) {
	defer torch.Recover(&err)
	c := &t.cfg
	s := t.state.Step
	// 1. Schedules.
	lr, bs := c.LRAt(s), c.BlockSizeAt(s)
	for _, o := range t.opts {
		o.SetLR(lr)
	}
	base := t.baseMask(bs)
	// 2. Draw the step's micro-batches and noise them (host, Go RNG); the
	// loss is normalised by the targets of the whole step, the
	// distillation term by those of its targets that have a teacher row.
	mbs := make([]*microBatch, c.GradAccum)
	norm, dnorm := 0, 0
	for k := range mbs {
		seqs := make([]sequence, c.MicroBatch)
		for i := range seqs {
			seqs[i] = t.loader.next()
		}
		mbs[k] = buildBatch(t.spec(s, bs), seqs, t.rng)
		norm += mbs[k].eligible
		dnorm += mbs[k].distilled
		st.tokens += int64(len(seqs) * t.seqLen)
	}
	// 3. Forward and backward, accumulating gradients in the master weights
	// (this rank's share of the micro-batches, then the sum over ranks).
	for _, mb := range t.mine(mbs) {
		lp, err := t.net.trainMicro(mb, base, float64(max(norm, 1)), float64(max(dnorm, 1)))
		if err != nil {
			return st, err
		}
		st.loss += lp.diff + lp.ar + lp.distill + lp.conf
		st.arLoss += lp.ar
		st.distill += lp.distill
		st.conf += lp.conf
		st.flops += t.flops.of(mb) + t.net.distill.flopsOf(mb)
	}
	if err := t.reduce(&st); err != nil {
		return st, err
	}
	// 4. Clip, update, clear.
	clip := c.GradClip
	if clip == 0 {
		clip = math.Inf(1)
	}
	st.gradNorm = torch.ClipGradNorm(t.all, clip)
	if !isFinite(st.loss) || !isFinite(st.gradNorm) {
		return st, fmt.Errorf("train: step %d: loss %v, gradient norm %v: not finite; nothing was updated (resume from the last checkpoint with a lower lr)", s+1, st.loss, st.gradNorm)
	}
	for _, o := range t.opts {
		o.Step()
		o.ZeroGrad()
	}
	// 5. Bookkeeping.
	t.state.Step++
	t.state.TokensSeen += st.tokens
	t.state.DataPosition = t.loader.pos
	t.state.BlockSize = bs
	t.state.Loss = st.loss
	return st, nil
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// evaluate is the objective's loss on the first eval_seqs held-out
// sequences, with noise drawn from a fixed generator, so evaluations at
// different steps (of the same block size) see the same masks.
func (t *trainer) evaluate() (loss float64, err error) {
	c := &t.cfg
	s := max(t.state.Step-1, 0)
	bs := c.BlockSizeAt(s)
	base := t.baseMask(bs)
	rng := rand.New(rand.NewPCG(c.Seed, 0xe7a1))
	n := min(c.EvalSeqs, t.eval.Len())
	var mbs []*microBatch
	norm := 0
	for i := 0; i < n; i += c.MicroBatch {
		var seqs []sequence
		for j := i; j < min(i+c.MicroBatch, n); j++ {
			seqs = append(seqs, crop(t.eval.Seq(j), t.seqLen))
		}
		mb := buildBatch(t.spec(s, bs), seqs, rng)
		mbs = append(mbs, mb)
		norm += mb.eligible
	}
	for _, mb := range t.mine(mbs) {
		lp, err := t.net.evalMicro(mb, base, float64(max(norm, 1)))
		if err != nil {
			return 0, err
		}
		loss += lp.diff + lp.ar
	}
	v, err := t.sum(loss) // over the ranks' shares
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// sample generates SampleTokens after SamplePrompt with the diffusion
// sampler at the current block size; a failure is reported, not fatal.
func (t *trainer) sample(ctx context.Context) {
	c := &t.cfg
	if t.tok == nil {
		tok, err := tokenizer.Load(c.Model)
		if err != nil {
			t.warn(fmt.Sprintf("no sample: %v", err))
			c.SampleEvery = 0
			return
		}
		t.tok = tok
	}
	s := *t.settings
	if c.Objective == ObjectiveBlock {
		s.BlockSize = t.state.BlockSize
	}
	if c.Objective == ObjectiveAR {
		s = *diffusion.ARSettings()
	}
	var prompt []int64
	for _, id := range t.tok.Encode(c.SamplePrompt) {
		prompt = append(prompt, int64(id))
	}
	if len(prompt) == 0 {
		return
	}
	sm := diffusion.NewSampler(t.net.m, &s)
	sm.Eager = true // the weights being trained stay unstacked
	o := sm.Defaults()
	o.MaxNewTokens = c.SampleTokens
	o.ContextLimit = len(prompt) + c.SampleTokens + s.BlockSize
	var err error
	if o.StopIDs, err = diffusion.EOSIDs(t.cfg.Model, t.net.m.Config, t.tok); err != nil {
		t.warn(fmt.Sprintf("sample: %v", err))
		return
	}
	res, err := sm.Generate(ctx, prompt, o, nil)
	if err != nil {
		t.warn(fmt.Sprintf("sample: %v", err))
		return
	}
	ids := make([]int, len(res.IDs))
	for i, id := range res.IDs {
		ids[i] = int(id)
	}
	t.logf("sample (step %d, block %d, %.2f tokens/forward): %q", t.state.Step, s.BlockSize, res.TPF, c.SamplePrompt+t.tok.Decode(ids, false))
}

// checkpoint writes the checkpoint of the current step.
func (t *trainer) checkpoint() error {
	t.state.RNG, _ = t.pcg.MarshalBinary()
	t.state.AdamSteps = [2]int64{t.opts[0].Steps, t.opts[1].Steps}
	t.state.Saved = time.Now().UTC()
	dir, err := saveCheckpoint(filepath.Join(t.cfg.Out, checkpointsDir), t.params, t.opts, checkpointFiles{
		state: &t.state, config: t.cfg.YAML(), settings: t.settingsRaw, modelConfig: t.modelConfig,
	}, t.cfg.KeepCheckpoints)
	if err != nil {
		return err
	}
	t.lastCkpt = dir
	return nil
}

// run is the training loop.
func (t *trainer) run(ctx context.Context) (res *Result, err error) {
	c := &t.cfg
	if t.leads() {
		if err := os.MkdirAll(c.Out, 0o755); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		if t.metrics, err = openMetrics(filepath.Join(c.Out, "metrics.jsonl")); err != nil {
			return nil, err
		}
	}
	res = &Result{EvalLoss: math.NaN()}
	start, began, startTokens := t.state.Step, time.Now(), t.state.TokensSeen
	t.rep = newReporter(t.o.Log, t.o.Terminal, c.LogEvery, start, c.Steps)
	t.logf("%s objective, %d steps from %d, %d x %d sequences of %d tokens per step (%s), %s %s on %s, %s parameters",
		c.Objective, c.Steps, start, c.GradAccum, c.MicroBatch, t.seqLen, describeSource(t.train), c.DType,
		map[bool]string{true: "with layer checkpointing", false: "without layer checkpointing"}[c.CheckpointLayers],
		t.dev, siCount(float64(t.net.m.Config.NumParams())))
	if start >= c.Steps {
		t.logf("already at step %d of %d: nothing to train", start, c.Steps)
	}
	var recs []Record
	for t.state.Step < c.Steps {
		t0 := time.Now()
		st, err := t.step()
		if err != nil {
			t.rep.finish()
			return nil, err
		}
		if t.dev.CUDA {
			torch.Synchronize(t.dev.Index)
		}
		dt := time.Since(t0).Seconds()
		res.Losses = append(res.Losses, st.loss)
		step := t.state.Step
		rec := Record{Step: step, Loss: st.loss, ARLoss: st.arLoss, DistillLoss: st.distill, ConfidenceLoss: st.conf, LR: c.LRAt(step - 1), BlockSize: t.state.BlockSize,
			Tokens: t.state.TokensSeen, TokPerSec: float64(st.tokens) / dt, GradNorm: st.gradNorm, Time: time.Now().UTC().Format(time.RFC3339)}
		if t.dev.CUDA {
			mfu := st.flops / dt / (c.PeakTFLOPS * 1e12)
			rec.MFU = &mfu
		}
		if t.o.afterStep != nil {
			t.o.afterStep(step)
		}
		t.injectFault(step)
		last := step == c.Steps
		stopping, err := t.agree(ctx.Err() != nil)
		if err != nil {
			t.rep.finish()
			return nil, err
		}
		// Eval and sample.
		if t.eval != nil && (last || (c.EvalEvery > 0 && step%c.EvalEvery == 0)) {
			l, err := t.evaluate()
			if err != nil {
				return nil, err
			}
			rec.EvalLoss, res.EvalLoss = &l, l
			t.logf("step %d: eval loss %.4f", step, l)
		}
		if c.SampleEvery > 0 && step%c.SampleEvery == 0 && !stopping && t.leads() {
			t.sample(ctx)
		}
		if len(recs) == 0 || recs[len(recs)-1].BlockSize != rec.BlockSize {
			t.logf("step %d: block size %d", step, rec.BlockSize)
		}
		recs = append(recs, rec)
		if t.metrics != nil {
			if err := t.metrics.write(rec); err != nil {
				return nil, err
			}
			if rec.EvalLoss != nil && !last {
				t.replot()
			}
		}
		t.rep.step(rec)
		// Checkpoint (rank 0's alone: the ranks' weights are the same).
		if c.CheckpointEvery >= 0 && t.leads() && (last || stopping || (c.CheckpointEvery > 0 && step%c.CheckpointEvery == 0)) {
			if err := t.checkpoint(); err != nil {
				return nil, err
			}
			if !last {
				t.logf("step %d: checkpoint %s", step, t.lastCkpt)
			}
		}
		if stopping && !last {
			t.rep.finish()
			if !t.leads() {
				return nil, fmt.Errorf("train: rank %d: interrupted after step %d (rank 0 writes the checkpoint)", t.group.Rank(), step)
			}
			if c.CheckpointEvery < 0 {
				return nil, fmt.Errorf("train: interrupted after step %d (checkpoints are off)", step)
			}
			return nil, fmt.Errorf("train: interrupted after step %d; checkpoint %s written; continue with --resume", step, t.lastCkpt)
		}
	}
	t.rep.finish()
	t.replot()
	t.summary(recs, time.Since(began), startTokens)
	res.State, res.Checkpoint = t.state, t.lastCkpt
	if t.lastCkpt != "" {
		t.logf("done: step %d, %s tokens, checkpoint %s", t.state.Step, siCount(float64(t.state.TokensSeen)), t.lastCkpt)
	} else {
		t.logf("done: step %d, %s tokens (no checkpoint)", t.state.Step, siCount(float64(t.state.TokensSeen)))
	}
	if c.Export && t.lastCkpt != "" {
		out := filepath.Join(c.Out, "model-"+checkpointName(t.state.Step))
		if fileExists(out) {
			t.logf("%s exists already; not exported again", out)
			res.Export = out
		} else {
			if err := Export(t.lastCkpt, out, ExportOptions{CreatedBy: t.o.CreatedBy}); err != nil {
				return nil, err
			}
			res.Export = out
			if t.state.SourceModel == "" {
				t.logf("exported %s (without tokenizer files: the run had no model directory)", out)
			} else {
				t.logf("exported %s (serve it with: dllm serve --model %s)", out, out)
			}
		}
	}
	return res, nil
}

// summary ends the run with a table: the steps, tokens and time, the best
// eval loss (over the whole run, a resumed one's earlier part included),
// throughput and MFU leaving out this run's first step (warm-up: allocator
// growth, kernel selection) when there are more, on a GPU the peak memory,
// and the picture of the metrics.
func (t *trainer) summary(recs []Record, took time.Duration, startTokens int64) {
	if len(recs) == 0 {
		return
	}
	first, last := recs[0], recs[len(recs)-1]
	rows := [][2]string{
		{"steps", fmt.Sprintf("%d-%d of %d", first.Step, last.Step, t.cfg.Steps)},
		{"tokens", fmt.Sprintf("%s (%s this run)", siCount(float64(last.Tokens)), siCount(float64(last.Tokens-startTokens)))},
		{"time", took.Round(time.Second).String()},
	}
	all := recs
	if t.metrics != nil {
		if r, err := readMetrics(filepath.Join(t.cfg.Out, "metrics.jsonl")); err == nil && len(r) > 0 {
			all = r
		}
	}
	best, bestStep, lastEval := math.Inf(1), 0, math.NaN()
	for _, r := range all {
		if r.EvalLoss != nil {
			if *r.EvalLoss < best {
				best, bestStep = *r.EvalLoss, r.Step
			}
			lastEval = *r.EvalLoss
		}
	}
	if bestStep > 0 {
		rows = append(rows, [2]string{"best eval loss", fmt.Sprintf("%.4f at step %d (last %.4f)", best, bestStep, lastEval)})
	}
	timed := recs
	if len(timed) > 1 {
		timed = timed[1:]
	}
	var tps, mfu float64
	for _, r := range timed {
		tps += r.TokPerSec
		if r.MFU != nil {
			mfu += *r.MFU
		}
	}
	n := float64(len(timed))
	thr := fmt.Sprintf("%s tokens/s over steps %d-%d", siCount(tps/n), timed[0].Step, timed[len(timed)-1].Step)
	if t.dev.CUDA {
		thr += fmt.Sprintf(", MFU %.1f%% of %.0f TFLOPS", 100*mfu/n, t.cfg.PeakTFLOPS)
	}
	rows = append(rows, [2]string{"throughput", thr})
	if t.dev.CUDA {
		if ms, err := torch.CUDAMemStats(t.dev.Index); err == nil {
			rows = append(rows, [2]string{"peak GPU memory", fmt.Sprintf("%.1f GB (reserved %.1f GB)", float64(ms.Peak)/1e9, float64(ms.Reserved)/1e9)})
		}
	}
	if t.metrics != nil {
		rows = append(rows, [2]string{"metrics", filepath.Join(t.cfg.Out, "metrics.jsonl") + ", " + filepath.Join(t.cfg.Out, PlotFile)})
	}
	t.logf("summary:")
	for _, r := range rows {
		t.logf("  %-16s %s", r[0], r[1])
	}
}

// resolveDevice turns "auto" into the first GPU when there is one.
func resolveDevice(s string) (torch.Device, error) {
	if s == "auto" || s == "" {
		if torch.CUDAAvailable() {
			return torch.CUDA(0), nil
		}
		return torch.CPU, nil
	}
	d, err := torch.ParseDevice(s)
	if err != nil {
		return d, fmt.Errorf("train: %w", err)
	}
	if d.CUDA && (!torch.CUDAAvailable() || d.Index >= torch.CUDADeviceCount()) {
		return d, fmt.Errorf("train: device %s requested but libtorch sees %d GPU(s) (shim %s)", d, torch.CUDADeviceCount(), torch.ShimPath())
	}
	return d, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
