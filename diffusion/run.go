package diffusion

import (
	"context"

	"dllm/model"
	"dllm/torch"
)

// generation is one Generate call's device state.
type generation struct {
	m     *model.Model
	p     plan
	cache *model.KVCache
	pick  *picker
	// carry (1, V) is, with the shift, the logit row of the last committed
	// position: the prediction for the next block's first position.
	carry *torch.Tensor
	steps int // forwards after the prefill
}

func newGeneration(m *model.Model, p plan) (*generation, error) {
	cache, err := m.NewCache(1, p.cacheLen)
	if err != nil {
		return nil, err
	}
	g := &generation{m: m, p: p, cache: cache}
	if err := torch.Try(func() { g.pick = newPicker(p, m.Device, m.Config.VocabSize) }); err != nil {
		cache.Free()
		return nil, err
	}
	return g, nil
}

func (g *generation) free() {
	g.cache.Free()
	g.pick.free()
	g.carry.Free()
}

// input copies ids to the device as (1, T).
func (g *generation) input(ids []int64) *torch.Tensor {
	cpu := torch.FromSlice(ids, 1, int64(len(ids)))
	if !g.m.Device.CUDA {
		return cpu
	}
	defer cpu.Free()
	return cpu.To(torch.Int64, g.m.Device)
}

// prefill writes the prompt into the KV cache with causal attention, in
// chunks, computing logits only for the last position (the carry).
func (g *generation) prefill(ctx context.Context, prompt []int64) error {
	for start := 0; start < len(prompt); start += g.p.chunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(start+g.p.chunk, len(prompt))
		last := end == len(prompt)
		if err := g.extend(prompt[start:end], model.Attention{Kind: model.Causal}, last && g.p.shift); err != nil {
			return err
		}
	}
	return nil
}

// commit writes a finished block into the KV cache: it runs the block
// again so the cached keys and values are those of its final tokens (the
// denoising forwards cached those of masks). Committed text is clean
// context, which attends causally, exactly as the AR model read text and as
// training presents it (docs/training.md); only the block being denoised
// sees itself bidirectionally.
func (g *generation) commit(ids []int64) error {
	g.steps++
	return g.extend(ids, model.Attention{Kind: model.Causal}, g.p.shift)
}

// extend runs ids after the cached context, commits them to the cache and,
// when carry is set, keeps the last logit row as the carry.
func (g *generation) extend(ids []int64, att model.Attention, carry bool) error {
	x := g.input(ids)
	defer x.Free()
	o := model.ForwardOpts{Attention: att, Cache: g.cache}
	if carry {
		o.LastN = 1
		logits, err := g.m.Forward(x, o) // (1, 1, V)
		if err != nil {
			return err
		}
		defer logits.Free()
		g.carry.Free()
		g.carry = logits.Reshape(1, -1)
	} else {
		// The head is the largest matmul; a cache-only pass skips it.
		h, err := g.m.Hidden(x, o)
		if err != nil {
			return err
		}
		h.Free()
	}
	return g.cache.Commit(int64(len(ids)))
}

// predict returns a candidate and its probability for each position of
// the canvas: from one forward of the block over the cached context, or,
// with the shift when only the first position is masked, from the carry
// alone (one candidate, no forward).
func (g *generation) predict(c *canvas) ([]int64, []float64, error) {
	if g.p.shift && c.onlyFirstMasked() {
		tok, conf := g.pick.pick(g.carry)
		return tok, conf, nil
	}
	x := g.input(c.ids)
	defer x.Free()
	g.steps++
	logits, err := g.m.Forward(x, model.ForwardOpts{Attention: model.Attention{Kind: model.Bidirectional}, Cache: g.cache})
	if err != nil {
		return nil, nil, err
	}
	defer logits.Free()
	n := int64(len(c.ids))
	rows := logits.Reshape(n, -1) // (n, V): row i predicts position i
	defer rows.Free()
	if g.p.shift {
		// Row i predicts position i+1; the carry predicts position 0.
		head := rows.Narrow(0, 0, n-1)
		defer head.Free()
		shifted := torch.Cat(0, g.carry, head)
		defer shifted.Free()
		tok, conf := g.pick.pick(shifted)
		return tok, conf, nil
	}
	tok, conf := g.pick.pick(rows)
	return tok, conf, nil
}

// denoise fills a canvas of n positions until its output is settled (see
// canvas.settled) and returns the tokens it adds to the output.
func (g *generation) denoise(ctx context.Context, n, need int) (out []int64, stopped bool, err error) {
	c := newCanvas(n, g.p.mask)
	for step := 1; ; step++ {
		if keep, stopped, done := c.settled(need, g.p.stop); done {
			return c.ids[:keep], stopped, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		tok, conf, err := g.predict(c)
		if err != nil {
			return nil, false, err
		}
		last := step >= g.p.maxSteps
		if g.p.fixed > 0 {
			c.commitTop(tok, conf, g.p.fixed, g.p.shift, last)
		} else {
			c.commit(tok, conf, g.p.threshold, last)
		}
	}
}
