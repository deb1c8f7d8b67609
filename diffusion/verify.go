package diffusion

import (
	"context"
	"slices"
)

// Verify decoding (Options.Verify; docs/sampler.md): each block is drafted
// by denoising as usual, then checked before any of it is output. A
// finished block goes into the KV cache causally anyway (generation.commit),
// and with the shift the logit row of each of its positions is then the
// model's prediction of the next token from the clean text before it: the
// AR model it was converted from, which training's AR loss keeps. The draft
// stands up to its first token that this greedy prediction disagrees with;
// the prediction replaces that token (it read only text that stands, so it
// is what greedy AR decoding writes there) and the rest of the draft is
// drafted again. The check rides on the next block's first denoising
// forward, as the commit does, so a draft that stands costs nothing; one
// that does not costs that forward again, since it read the dropped tokens.

// verified is generate's block loop with verify: every block is output a
// block late, once the forward that follows it has checked it.
func (g *generation) verified(ctx context.Context, res *Result, onBlock BlockFunc) error {
	p := g.p
	var draft []int64 // the last block drafted, not yet checked
	stops := false    // the draft ends with a stop token
	before := g.steps
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// 1. The draft goes to the next forward to be checked. That is the
		//    next block's first step; the last draft (it ends with a stop
		//    token or at the length limit or the context's end) is checked
		//    alone, and a last draft of one token, the carry's prediction,
		//    needs no check.
		g.pending = draft
		left := p.maxNew - len(res.IDs) - len(draft)
		n := min(p.block, g.room())
		var next []int64
		nextStops := false
		switch {
		case draft != nil && (stops || left <= 0 || n <= 0) && len(draft) == 1:
			g.pending, g.accepted = nil, draft
		case draft != nil && (stops || left <= 0 || n <= 0):
			if _, err := g.flush(nil); err != nil {
				return err
			}
		default:
			// 2. The next draft; its first step checks this one.
			ids, stopped, err := g.denoise(ctx, n, min(n, left))
			if err != nil {
				return err
			}
			next, nextStops = ids, stopped
		}
		// 3. Output what the check kept, without a stop token.
		kept := g.accepted
		g.accepted = nil
		whole := len(kept) == len(draft)
		if whole && stops {
			kept = kept[:len(kept)-1]
		}
		res.IDs = append(res.IDs, kept...)
		finish := ""
		switch {
		case whole && stops:
			finish = "stop"
		case len(res.IDs) >= p.maxNew || (whole && next == nil):
			// Whole and nothing drafted after it: the context is full.
			finish = "length"
		}
		if onBlock != nil && (len(kept) > 0 || finish != "") {
			halt, err := onBlock(Block{IDs: slices.Clone(kept), Steps: g.steps - before})
			if err != nil {
				return err
			}
			before = g.steps
			if halt {
				finish = "stop"
			}
		}
		if finish != "" {
			res.FinishReason = finish
			return nil
		}
		draft, stops = next, nextStops
	}
}

// predictChecked is predict's first step of a canvas while a draft is
// pending: one forward runs the draft causally and the canvas after it;
// the draft's rows check it (check), and the canvas's picks are returned
// when the whole draft stands. Otherwise the canvas saw tokens that were
// dropped, and its step runs again after what stands.
func (g *generation) predictChecked(c *canvas) (*picks, error) {
	g.steps++
	d, n := g.pending, len(c.ids)
	p := len(d)
	g.pending = nil
	logits, err := g.eng.forward(append(d[:p:p], c.ids...), p, p+n, nil) // (p+n, V)
	if err != nil {
		return nil, err
	}
	defer logits.free()
	// Row i predicts token i+1 of the draft and the canvas (shift); the
	// last row predicts past the canvas.
	rows := logits.narrow(0, int64(p+n-1))
	defer rows.free()
	tok, conf := g.pick.pick(nil, rows)
	keep, err := g.check(d, tok, logits)
	if err != nil {
		return nil, err
	}
	if keep < p {
		return g.predict(c)
	}
	return &picks{tok: tok[p-1:], conf: conf[p-1:]}, nil
}

// checkAlone checks the pending draft with a forward of its own.
func (g *generation) checkAlone() error {
	g.steps++
	d := g.pending
	p := len(d)
	g.pending = nil
	logits, err := g.eng.forward(d, p, p, nil) // (p, V)
	if err != nil {
		return err
	}
	defer logits.free()
	var tok []int64
	if p > 1 {
		rows := logits.narrow(0, int64(p-1))
		defer rows.free()
		tok, _ = g.pick.pick(nil, rows)
	}
	_, err = g.check(d, tok, logits)
	return err
}

// check keeps the prefix of the draft d that the AR picks tok (tok[i]
// predicts d[i+1]) agree with: it goes into the KV cache (the forward of
// logits wrote d's keys and values) and to g.accepted, and the row after
// it, the AR prediction of the token that replaces the first one dropped,
// becomes the carry. It returns how many tokens stand. d[0], predicted by
// the carry, always does.
func (g *generation) check(d, tok []int64, logits logitRows) (int, error) {
	keep := len(d)
	for i := 1; i < len(d); i++ {
		if tok[i-1] != d[i] {
			keep = i
			break
		}
	}
	g.checked += len(d) - 1
	g.agreed += keep - 1
	// A draft that did not stand is as long as the next needs to be, and
	// each one of two tokens or more that stood lets the next be one
	// longer (a one-token draft, the carry's prediction, proves nothing):
	// on text the model drafts badly, decoding falls back towards one
	// token per forward instead of paying a forward for every rejection.
	switch {
	case keep < len(d):
		g.reach = keep
	case len(d) >= 2:
		g.reach = min(g.reach+1, g.p.block)
	}
	if err := g.eng.commit(int64(keep)); err != nil {
		return 0, err
	}
	g.setCarry(logits, int64(keep-1))
	g.accepted = append(g.accepted, d[:keep]...)
	return keep, nil
}
