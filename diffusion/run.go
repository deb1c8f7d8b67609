package diffusion

import (
	"context"

	"dllm/model"
	"dllm/torch"
)

// generation is one Generate call's device state.
type generation struct {
	p    plan
	eng  engine
	pick *picker
	// carry (1, V) is, with the shift, the logit row of the last committed
	// position: the prediction for the next block's first position.
	carry logitRows
	steps int // forwards after the prefill
	// pending is the last finished block, not yet in the KV cache: the
	// next block's first denoising forward runs it first (see commit).
	// With verify it is a draft, checked by that forward (see verify.go).
	pending []int64
	// accepted is, with verify, what the last check kept of the draft,
	// not yet output; checked and agreed count the checked tokens.
	accepted        []int64
	checked, agreed int
	// reach is, with verify, how long a fixed prefix a draft needs before
	// its block stops denoising (see check): the block size at first.
	reach int
	// cuda and device say where the model runs.
	cuda   bool
	device int
}

func newGeneration(m *model.Model, eng engine, p plan) (*generation, error) {
	g := &generation{p: p, eng: eng, reach: p.block, cuda: m.Device.CUDA, device: m.Device.Index}
	if err := torch.Try(func() { g.pick = newPicker(p, m.Device) }); err != nil {
		eng.free()
		return nil, err
	}
	return g, nil
}

func (g *generation) free() {
	g.eng.free()
	g.pick.free()
	g.carry.free()
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
		if _, err := g.extend(prompt[start:end], last && g.p.shift, nil); err != nil {
			return err
		}
	}
	return nil
}

// commit queues a finished block for the KV cache. The block must be run
// again so the cached keys and values are those of its final tokens (the
// denoising forwards cached those of masks), causally: committed text is
// clean context, exactly as the AR model read text and as training presents
// it (docs/training.md); only the block being denoised sees itself
// bidirectionally. That run rides on the next block's first denoising
// forward (its rows first, causal, then the new block's), which saves a
// forward per block; flush runs it alone where there is no such forward.
func (g *generation) commit(ids []int64) error {
	if _, err := g.flush(nil); err != nil {
		return err
	}
	g.pending = ids
	return nil
}

// flush runs the pending block alone, as its own forward (with verify,
// checking it). spec, when not nil, is the pick of the carry alone that
// the forward's step may draw (see extend).
func (g *generation) flush(spec *pickSpec) (*picks, error) {
	if g.pending == nil {
		return nil, nil
	}
	if g.p.verify {
		return nil, g.checkAlone()
	}
	ids := g.pending
	g.pending = nil
	g.steps++
	return g.extend(ids, g.p.shift, spec)
}

// room is how many positions the generation may still add after the
// pending block.
func (g *generation) room() int { return int(g.eng.room()) - len(g.pending) }

// extend runs ids causally after the cached context, commits them to the
// cache and, when carry is set, keeps the last logit row as the carry.
// spec, when not nil, is the carry's pick: the Batcher draws it with the
// step's other sequences' and extend returns that draw (nil where none
// was made, for the caller to pick from the carry).
func (g *generation) extend(ids []int64, carry bool, spec *pickSpec) (*picks, error) {
	rows := 0
	if carry {
		rows = 1
	}
	logits, err := g.eng.forward(ids, len(ids), rows, spec) // (1, V) or none
	if err != nil {
		return nil, err
	}
	if carry {
		g.setCarry(logits, 0)
		logits.free()
	}
	if err := g.eng.commit(int64(len(ids))); err != nil {
		return nil, err // a Batcher's draw is on the host: nothing to free
	}
	return logits.picked, nil
}

// setCarry keeps row i of logits as the carry, in storage of its own: a
// view would keep all of logits alive, which for a sequence of a batch
// (Batcher) is every sequence's rows of that step.
func (g *generation) setCarry(logits logitRows, i int64) {
	row := logits.narrow(i, 1)
	defer row.free()
	g.carry.free()
	g.carry = row.clone()
}

// predict queues one step's prediction for the canvas c and returns its
// picks (a candidate and its probability for each position) on their way
// to the host: from one forward of the block over the cached context, or,
// with the shift when only the first position is masked, from the carry
// alone (one candidate, no forward).
func (g *generation) predict(c *canvas) (*picks, error) {
	if g.p.shift && c.onlyFirstMasked() {
		// The carry comes from the pending block's forward, whose step
		// draws it beside the batch's other sequences when it samples
		// (AR decoding: every step is this one).
		pk, err := g.flush(&pickSpec{pick: g.pick, lo: 0, hi: 1})
		if err != nil || pk != nil {
			return pk, err
		}
		return g.pick.start(nil, g.carry), nil
	}
	if g.p.verify && g.pending != nil {
		return g.predictChecked(c)
	}
	g.steps++
	n := len(c.ids)
	// 1. One forward: the pending block (causal; with the shift its last
	//    row is the carry) and the canvas, which sees it and itself.
	p := len(g.pending)
	want := n
	if p > 0 && g.p.shift {
		want++
	}
	// The pick canvasPicks makes: with the shift, the carry and the rows
	// before the last (the carry being this forward's first row when
	// there is a pending block), else the last n rows.
	spec := &pickSpec{pick: g.pick, lo: want - n, hi: want}
	if g.p.shift {
		if p > 0 {
			spec.lo, spec.hi = 0, n
		} else {
			spec.first, spec.hi = g.carry.t, want-1
		}
	}
	logits, err := g.eng.forward(append(g.pending[:p:p], c.ids...), p, want, spec)
	if err != nil {
		return nil, err
	}
	defer logits.free()
	if p > 0 {
		g.pending = nil
		if err := g.eng.commit(int64(p)); err != nil {
			return nil, err
		}
		if g.p.shift {
			g.setCarry(logits, 0)
		}
	}
	if logits.picked != nil {
		return logits.picked, nil
	}
	return g.canvasPicks(logits, want, n), nil
}

// canvasPicks starts the picks of a canvas of n positions from the last n
// of want logit rows: row i predicts position i, or with the shift
// position i+1, the carry predicting position 0.
func (g *generation) canvasPicks(logits logitRows, want, n int) *picks {
	rows := logits.narrow(int64(want-n), int64(n))
	defer rows.free()
	if g.p.shift {
		head := rows.narrow(0, int64(n-1))
		defer head.free()
		return g.pick.start(&g.carry, head)
	}
	return g.pick.start(nil, rows)
}

// queue queues the next denoising step of a fixed-commit canvas of n
// positions behind the step whose picks pk are still on their way (see
// denoise): its canvas is made on the device from that step's, as
// canvas.commitTop will make it on the host. nil where the engine cannot.
func (g *generation) queue(pk *picks, n int) (*picks, error) {
	logits, ok, err := g.eng.next(n, pk.dev, g.p.mask, g.p.fixed, g.p.shift)
	if err != nil || !ok {
		return nil, err
	}
	defer logits.free()
	return g.canvasPicks(logits, n, n), nil
}

// denoise fills a canvas of n positions until its output is settled (see
// canvas.settled) and returns the tokens it adds to the output, with the
// stop token that ended it last when stopped. With a
// fixed number of commits a step, a step that is sure to come (more
// positions masked than this one fixes, and the output waiting for all of
// them) is queued before this step's picks reach the host, its canvas
// made on the device: on a GPU the host's turn between the two steps and
// the next forward's launch then overlap this step's work (docs/
// performance.md). Only a stop token ends such a block early; the queued
// step then runs for nothing.
func (g *generation) denoise(ctx context.Context, n, need int) (out []int64, stopped bool, err error) {
	c := newCanvas(n, g.p.mask)
	var next *picks // the queued step's
	defer func() {
		if next != nil {
			next.free()
		}
	}()
	for step := 1; ; step++ {
		if keep, stopped, done := c.settled(need, g.p.stop); done {
			if stopped {
				keep++
			}
			return c.ids[:keep], stopped, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		pk := next
		if next != nil {
			next = nil
			g.steps++
		} else if pk, err = g.predict(c); err != nil {
			return nil, false, err
		}
		last := step >= g.p.maxSteps
		if g.p.fixed > 0 && !last && need == n && c.masked() > g.p.fixed {
			if next, err = g.queue(pk, n); err != nil {
				pk.free()
				return nil, false, err
			}
		}
		tok, conf := pk.wait()
		if g.p.fixed > 0 {
			c.commitTop(tok, conf, g.p.fixed, g.p.shift, last)
			continue
		}
		accepted := c.commit(tok, conf, g.p.rule, last)
		if g.p.verify {
			// A draft is checked left to right and kept up to its first
			// wrong token, so denoising past a stall is mostly waste: the
			// draft is the fixed prefix as soon as a step stalls, or as soon
			// as it is as long as recent drafts stood (g.reach). Position 0
			// is the carry's prediction, final (and what the check keeps):
			// it is fixed at once, so a draft is never empty.
			c.ids[0], c.fixed[0] = tok[0], true
			if k := c.prefix(); (accepted == 0 || k >= g.reach) && !last {
				return stopCut(c.ids[:min(k, need)], g.p.stop)
			}
		}
	}
}

// stopCut cuts ids after their first stop token, if any.
func stopCut(ids []int64, stop map[int64]bool) (out []int64, stopped bool, err error) {
	for i, id := range ids {
		if stop[id] {
			return ids[:i+1], true, nil
		}
	}
	return ids, false, nil
}
