package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"dllm/diffusion"
	"dllm/model"
	"dllm/tokenizer"
	"dllm/torch"
)

// Checked is a model directory whose small files were read and checked:
// config, dllm.json, tokenizer and the weights' headers. Opening one takes
// well under a second, so a bad directory is reported before the server
// starts; Load then reads the weights.
type Checked struct {
	Dir       string
	Config    *model.Config
	Settings  *diffusion.Settings
	Tokenizer *tokenizer.Tokenizer
	// StopIDs are the eos ids of config.json, generation_config.json and
	// the tokenizer, which end a generation.
	StopIDs []int64
}

// probeChat is the conversation Check renders through the chat template.
var probeChat = json.RawMessage(`[{"role":"user","content":"Hello"}]`)

// Check reads and validates a dllm model directory without loading weights.
func Check(dir string) (*Checked, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("model directory: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("model directory %s is not a directory", dir)
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	settings, err := diffusion.LoadSettings(dir)
	if err != nil {
		return nil, err
	}
	if err := settings.Validate(cfg.VocabSize); err != nil {
		return nil, err
	}
	ck, err := model.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	err = model.CheckTensors(cfg, ck.Shapes())
	ck.Close()
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	if !tok.HasChatTemplate() {
		return nil, fmt.Errorf("%s: the tokenizer has no chat template (chat_template.jinja or tokenizer_config.json's chat_template)", dir)
	}
	// A template that cannot render the plainest conversation would fail
	// every chat request with a 400 while /health said all was well.
	if _, err := tok.ApplyChatTemplate(tokenizer.ChatRequest{Messages: probeChat, AddGenerationPrompt: true}); err != nil {
		return nil, fmt.Errorf("%s: the chat template cannot render a one-message conversation: %w", dir, err)
	}
	c := &Checked{Dir: dir, Config: cfg, Settings: settings, Tokenizer: tok}
	if c.StopIDs, err = diffusion.EOSIDs(dir, cfg, tok); err != nil {
		return nil, err
	}
	if len(c.StopIDs) == 0 {
		return nil, fmt.Errorf("%s: no eos token id in config.json, generation_config.json or the tokenizer, so generation could not stop", dir)
	}
	return c, nil
}

// LoadOptions choose how a checked model is loaded.
type LoadOptions struct {
	Device torch.Device
	DType  torch.DType
	// MaxModelLen caps prompt plus generated tokens; 0 or more than the
	// model's max_position_embeddings means max_position_embeddings.
	MaxModelLen int
	// Verify checks the weights files while they load: their sha256
	// against dllm.json's weights_sha256 where it records them, and every
	// value for NaN and infinities (model.VerifyWeights). Damaged weights
	// are then a start-up error instead of garbage or empty answers.
	Verify bool
	// Warmup makes, on a GPU, the decoder for the whole context
	// (diffusion.Sampler's Reserve) and runs one short generation before
	// the model is reported ready, so that the first request does not pay
	// for kernel setup.
	Warmup bool
	// NoNormFold and NoPersistentKernel are model.LoadOptions' decoder
	// choices: less GPU memory, and GPUs shared through MPS.
	NoNormFold, NoPersistentKernel bool
	// MaxNumSeqs is how many requests generate at once; above 1 they run
	// as one batch (diffusion.Batcher), each in a KV cache slot of the
	// whole context; 1 is the single-stream sampler. 0: DefaultGPUSeqs on
	// a GPU (as many as the memory fits: Slots), 1 on the CPU, where a
	// slot's memory is not capped by what is free and a batch gains less.
	MaxNumSeqs int
	// KVCacheGB, when positive, caps the batch's KV cache in GiB: fewer
	// sequences than MaxNumSeqs run at once when their slots need more.
	// 0 on a GPU: the free memory after the weights, less kvHeadroom.
	KVCacheGB float64
	// MaxNumBatchedTokens caps the tokens of one batched forward (prompt
	// chunks and blocks together); 0 = diffusion.BatchConfig's default.
	MaxNumBatchedTokens int
}

// DefaultGPUSeqs is LoadOptions.MaxNumSeqs's default on a GPU.
const DefaultGPUSeqs = 64

// kvHeadroom is the GPU memory a batch's KV cache leaves free when
// KVCacheGB does not size it: the forwards' activations, the logits of
// every row (64 sequences of 32-token blocks: 0.5 GB for MiniCPM5-2B's
// vocabulary), the CUDA graphs.
const kvHeadroom = 3 << 30

// Slots is how many sequences of the served context run at once under o:
// MaxNumSeqs, fewer when their KV cache slots need more than KVCacheGB,
// or, without it, than free bytes (the GPU's free memory after the
// weights; 0: unknown, no cap) less kvHeadroom. An error says what to
// change when not even one fits.
func (c *Checked) Slots(o LoadOptions, free int64) (int, error) {
	seqs := max(o.MaxNumSeqs, 1)
	ctxLen := c.ContextLength(o.MaxModelLen)
	slot := c.Config.KVBytesPerToken(o.DType.Size()) * int64(ctxLen)
	gib := func(b int64) float64 { return float64(b) / (1 << 30) }
	switch {
	case o.KVCacheGB > 0:
		n := int(o.KVCacheGB * (1 << 30) / float64(slot))
		if n < 1 {
			return 0, fmt.Errorf("--kv-cache-gb %g cannot hold one sequence of the context of %d positions (%.2f GiB): raise it or lower --max-model-len",
				o.KVCacheGB, ctxLen, gib(slot))
		}
		return min(n, seqs), nil
	case seqs > 1 && free > 0:
		// The decoder's copies of the QKV and gate-up weights with the
		// RMSNorm folded in come after the free memory was read.
		keep := int64(kvHeadroom)
		if !o.NoNormFold {
			cfg := c.Config
			keep += int64(cfg.NumHiddenLayers) * int64((cfg.NumAttentionHeads+2*cfg.NumKeyValueHeads)*cfg.HeadDim+2*cfg.IntermediateSize) *
				int64(cfg.HiddenSize) * int64(o.DType.Size())
		}
		n := int((free - keep) / slot)
		if n < 1 {
			return 0, fmt.Errorf("the GPU's %.1f GiB free after the weights cannot hold one sequence of the context of %d positions (%.2f GiB) beside %.1f GiB for the forwards and folded weights: lower --max-model-len",
				gib(free), ctxLen, gib(slot), gib(keep))
		}
		return min(n, seqs), nil
	}
	return seqs, nil
}

// ContextLength is the context a model is served with.
func (c *Checked) ContextLength(maxModelLen int) int {
	n := c.Config.MaxPositionEmbeddings
	if maxModelLen > 0 && maxModelLen < n {
		n = maxModelLen
	}
	return n
}

// Load reads the weights onto the device, verifying them meanwhile when
// o.Verify, and builds the sampler.
func (c *Checked) Load(ctx context.Context, o LoadOptions) (m *Model, err error) {
	if o.MaxNumSeqs == 0 {
		o.MaxNumSeqs = 1
		if o.Device.CUDA {
			o.MaxNumSeqs = DefaultGPUSeqs
		}
	}
	// The check reads the files a second time, beside the load, the KV
	// cache and the warm-up, so it costs about the slower of the two
	// rather than their sum. Every return waits for it; an early one
	// cancels it first.
	vctx, cancel := context.WithCancel(ctx)
	verified := make(chan error, 1)
	if o.Verify {
		go func() { verified <- model.VerifyWeights(vctx, c.Dir, c.Settings.WeightsSHA256) }()
	} else {
		verified <- nil
	}
	defer func() {
		if err != nil {
			cancel()
		}
		verr := <-verified
		cancel()
		if err == nil && verr != nil {
			m.Close()
			m, err = nil, fmt.Errorf("the weights are damaged, not serving them: %w", verr)
		}
	}()

	lm, err := model.Load(c.Dir, model.LoadOptions{Device: o.Device, DType: o.DType, NoNormFold: o.NoNormFold, NoPersistentKernel: o.NoPersistentKernel})
	if err != nil {
		return nil, err
	}
	ctxLen := c.ContextLength(o.MaxModelLen)
	var free int64
	if o.Device.CUDA && o.MaxNumSeqs > 1 && o.KVCacheGB <= 0 {
		if free, _, err = torch.CUDAMemInfo(o.Device.Index); err != nil {
			lm.Free()
			return nil, err
		}
	}
	seqs, err := c.Slots(o, free)
	if err != nil {
		lm.Free()
		return nil, err
	}
	var gen generator
	var sampler *diffusion.Sampler
	var batcher *diffusion.Batcher
	var stats func() diffusion.BatchStats
	var kvBytes int64
	closeModel := lm.Free
	if o.MaxNumSeqs > 1 {
		kvBytes = c.Config.KVBytesPerToken(o.DType.Size()) * int64(ctxLen) * int64(seqs)
		b, err := diffusion.NewBatcher(lm, c.Settings, diffusion.BatchConfig{Seqs: seqs, Context: ctxLen, StepTokens: o.MaxNumBatchedTokens})
		if err != nil {
			lm.Free()
			return nil, fmt.Errorf("the KV cache of %d sequences of %d positions (%.1f GiB): %w; lower --max-num-seqs or --max-model-len, or cap it with --kv-cache-gb",
				seqs, ctxLen, float64(kvBytes)/(1<<30), err)
		}
		gen, batcher, closeModel, stats = b, b, func() { b.Close(); lm.Free() }, b.Stats
	} else {
		sampler = diffusion.NewSampler(lm, c.Settings)
		gen = sampler
	}
	// The engine's defaults (dllm.json's, resolved by diffusion alone),
	// with the stop ids and the context this server allows.
	defaults := gen.Defaults()
	defaults.StopIDs, defaults.ContextLimit = c.StopIDs, ctxLen
	m = &Model{
		Engine:        diffusionEngine{gen},
		Tokenizer:     c.Tokenizer,
		Defaults:      defaults,
		ContextLength: ctxLen,
		BlockSize:     c.Settings.BlockSize,
		VocabSize:     c.Config.VocabSize,
		MaxNumSeqs:    seqs,
		BatchStats:    stats,
		KVCacheBytes:  kvBytes,
		Close:         closeModel,
	}
	if o.Warmup && o.Device.CUDA {
		// The KV cache for the whole context now, with the graphs of long
		// contexts' block steps (in a batch, a lone request's: slot 0 runs
		// the single-stream path), and one short generation: no request
		// waits for them. (On the CPU there are no graphs, and the
		// single-stream cache grows as requests need it.)
		if batcher != nil {
			err = batcher.Reserve(c.Settings.BlockSize)
		} else {
			err = sampler.Reserve(m.ContextLength, c.Settings.BlockSize)
		}
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("reserving the decoder for %d positions: %w", m.ContextLength, err)
		}
		if err := warmup(ctx, m, c.Settings.BlockSize); err != nil {
			m.Close()
			return nil, fmt.Errorf("warm-up generation: %w", err)
		}
	}
	return m, nil
}

// warmup generates one block (of block tokens) from a short prompt.
func warmup(ctx context.Context, m *Model, block int) error {
	prompt := toInt64(m.Tokenizer.Encode("Hello"))
	if len(prompt) == 0 {
		prompt = []int64{0}
	}
	o := m.Defaults
	o.MaxNewTokens = max(1, block)
	o.ContextLimit = min(m.ContextLength, len(prompt)+2*o.MaxNewTokens)
	_, err := m.Engine.Generate(ctx, prompt, o, func(diffusion.Block) (bool, error) { return false, nil })
	return err
}
