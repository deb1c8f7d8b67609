package diffusion

import (
	"context"
	"slices"
	"time"

	"dllm/model"
	"dllm/torch"
)

// Sampler generates text with a block-diffusion model: block by block, each
// block denoised from all-masks in a few forwards over the KV cache of the
// text before it (docs/sampler.md). It is not safe for concurrent use.
type Sampler struct {
	model    *model.Model
	settings *Settings
	dec      *model.Decoder // the fast engine's, made on first use (engine)

	// Eager runs Model.Forward over a KVCache instead of the model's
	// Decoder: for a model being trained, whose projections must not be
	// stacked (Model.NewDecoder), or to compare the two paths.
	Eager bool
	// noAhead never queues a fixed-commit step before the host has read
	// the picks of the step before: the tests' reference for the queued
	// path.
	noAhead bool
}

// NewSampler returns a sampler for m run as s describes (ARSettings for an
// unconverted AR checkpoint).
func NewSampler(m *model.Model, s *Settings) *Sampler {
	return &Sampler{model: m, settings: s}
}

// ARSettings run an AR checkpoint as the degenerate diffusion model: block
// size 1 with the shift, where each block is one token predicted by the
// previous forward, i.e. plain left-to-right decoding, the baseline a
// converted model is measured against. It has no mask token
// (MaskTokenID -1), which block size 1 never feeds.
func ARSettings() *Settings {
	s := NewSettings(-1, "", 1, true)
	s.Generation = Generation{Threshold: 1, MaxStepsPerBlock: 1, TopP: 1}
	return s
}

// Defaults are the options dllm.json asks for that a zero value cannot
// express (temperature, top-p and verify); callers start from them and
// override what a request sets. The other zero fields already mean
// dllm.json's.
func (s *Sampler) Defaults() Options { return defaults(s.settings) }

// defaults is Defaults for a model run as st.
func defaults(st *Settings) Options {
	g := st.Generation
	return Options{Temperature: g.Temperature, TopP: g.TopP, Verify: g.Verify}
}

// Generate continues prompt until a stop token, o.MaxNewTokens, the context
// limit or onBlock (which may be nil) ends it, handing each committed block
// to onBlock as soon as it is final. A cancelled ctx stops it between two
// steps with ctx.Err(). Bad requests are ErrInvalidRequest or
// ErrContextTooLong.
func (s *Sampler) Generate(ctx context.Context, prompt []int64, o Options, onBlock BlockFunc) (res *Result, err error) {
	start := time.Now()
	p, err := resolve(s.model, s.settings, prompt, o)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	torch.NoGrad(func() { res, err = s.generate(ctx, prompt, p, onBlock, start) })
	return res, err
}

func (s *Sampler) generate(ctx context.Context, prompt []int64, p plan, onBlock BlockFunc, start time.Time) (res *Result, err error) {
	defer torch.Recover(&err)
	eng, err := s.engine(p)
	if err != nil {
		return nil, err
	}
	g, err := newGeneration(s.model, eng, p)
	if err != nil {
		return nil, err
	}
	defer g.free()
	return g.run(ctx, prompt, onBlock, start)
}

// run generates from prompt: its prefill, then block after block until a
// stop token, the length limit or onBlock ends it.
func (g *generation) run(ctx context.Context, prompt []int64, onBlock BlockFunc, start time.Time) (res *Result, err error) {
	p := g.p
	// 1. The prompt into the KV cache.
	if err := g.prefill(ctx, prompt); err != nil {
		return nil, err
	}
	if g.cuda {
		// Only so that Prefill measures the work rather than its launch.
		if err := torch.Synchronize(g.device); err != nil {
			return nil, err
		}
	}
	res = &Result{IDs: []int64{}, Prefill: time.Since(start)}
	if p.verify {
		if err := g.verified(ctx, res, onBlock); err != nil {
			return nil, err
		}
		res.Checked, res.Accepted = g.checked, g.agreed
		return g.account(res, start), nil
	}
	// 2. Blocks until a stop token, the length limit or onBlock ends it.
	var pending []int64 // the last block, not yet in the KV cache
	for res.FinishReason == "" {
		before := g.steps
		if pending != nil {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := g.commit(pending); err != nil {
				return nil, err
			}
		}
		n := min(p.block, g.room())
		need := min(n, p.maxNew-len(res.IDs))
		ids, stopped, err := g.denoise(ctx, n, need)
		if err != nil {
			return nil, err
		}
		if stopped {
			ids = ids[:len(ids)-1]
		}
		res.IDs = append(res.IDs, ids...)
		if onBlock != nil {
			halt, err := onBlock(Block{IDs: slices.Clone(ids), Steps: g.steps - before})
			if err != nil {
				return nil, err
			}
			stopped = stopped || halt
		}
		switch {
		case stopped:
			res.FinishReason = "stop"
		case len(res.IDs) >= p.maxNew:
			res.FinishReason = "length"
		}
		pending = ids
	}
	return g.account(res, start), nil
}

// account fills res's step count, TPF and duration.
func (g *generation) account(res *Result, start time.Time) *Result {
	res.Steps = g.steps
	res.TPF = float64(len(res.IDs)) / float64(max(g.steps, 1))
	res.Duration = time.Since(start)
	return res
}
