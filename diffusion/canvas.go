package diffusion

import (
	"cmp"
	"math"
	"slices"
)

// canvas is one block being denoised: each position is still masked or
// fixed to a token, and a fixed token never changes.
type canvas struct {
	ids   []int64 // the model's input: the mask id or the fixed token
	fixed []bool
}

func newCanvas(n int, mask int64) *canvas {
	c := &canvas{ids: make([]int64, n), fixed: make([]bool, n)}
	for i := range c.ids {
		c.ids[i] = mask
	}
	return c
}

// onlyFirstMasked reports whether the first position is the only masked
// one. With the shift its prediction is the carried row, so such a step
// needs no forward.
func (c *canvas) onlyFirstMasked() bool {
	if c.fixed[0] {
		return false
	}
	for _, f := range c.fixed[1:] {
		if !f {
			return false
		}
	}
	return true
}

// masked is how many positions are still masked.
func (c *canvas) masked() int {
	n := 0
	for _, f := range c.fixed {
		if !f {
			n++
		}
	}
	return n
}

// commitRule is how a threshold step chooses the positions it commits.
type commitRule struct {
	threshold float64 // commit every position at least this probable
	// budget > 0 replaces the threshold: commit, most confident first, while
	// the summed probability of being wrong (1 - p) stays within it.
	budget   float64
	min, max int // at least / at most this many a step (0: no bound)
}

// commit fixes masked positions from one step's candidates tok and their
// probabilities conf (for positions 0..len(tok)-1) by rule r: those it
// accepts, never fewer than r.min nor more than r.max (the most
// confident; 0 = no bound) and always at least the single most confident
// one (the first on a tie); all of them when all is set. It returns how
// many the rule accepted on its own: 0 when the step stalled and only the
// bounds committed anything.
func (c *canvas) commit(tok []int64, conf []float64, r commitRule, all bool) (accepted int) {
	var open []int // masked positions, most confident first
	for i := range tok {
		if !c.fixed[i] {
			open = append(open, i)
		}
	}
	// Stable, so equal confidences keep position order.
	slices.SortStableFunc(open, func(a, b int) int { return cmp.Compare(conf[b], conf[a]) })
	n := len(open)
	if !all {
		n = 0
		risk := 0.0
		for _, i := range open {
			if r.budget > 0 {
				risk += 1 - conf[i]
				if risk > r.budget {
					break
				}
			} else if conf[i] < r.threshold {
				break
			}
			n++
		}
		accepted = n
		n = max(n, r.min, 1)
		if r.max > 0 {
			n = min(n, r.max)
		}
		n = min(n, len(open))
	}
	for _, i := range open[:n] {
		c.ids[i], c.fixed[i] = tok[i], true
	}
	return accepted
}

// prefix is how many leading positions are fixed.
func (c *canvas) prefix() int {
	n := 0
	for n < len(c.fixed) && c.fixed[n] {
		n++
	}
	return n
}

// commitTop fixes the k most confident masked positions (fewer when fewer
// remain; the first on a tie), all of them when all is set. With first set,
// an unfixed position 0 counts as the most confident: with the shift its
// candidate comes from the carry and is final from the block's start.
func (c *canvas) commitTop(tok []int64, conf []float64, k int, first, all bool) {
	var open []int
	for i := range tok {
		if !c.fixed[i] {
			open = append(open, i)
		}
	}
	rank := func(i int) float64 {
		if first && i == 0 {
			return math.Inf(1)
		}
		return conf[i]
	}
	// Stable, so equal confidences keep position order.
	slices.SortStableFunc(open, func(a, b int) int { return cmp.Compare(rank(b), rank(a)) })
	if !all {
		open = open[:min(k, len(open))]
	}
	for _, i := range open {
		c.ids[i], c.fixed[i] = tok[i], true
	}
}

// settled reports whether the block's contribution to the output is
// decided: its first need positions are fixed, or a fixed stop token is
// preceded only by fixed positions. keep is how many leading tokens go to
// the output and stopped whether a stop token ended it. Positions past
// need are cut by the length limit, so they are never waited for.
func (c *canvas) settled(need int, stop map[int64]bool) (keep int, stopped, done bool) {
	for i := range need {
		if !c.fixed[i] {
			return 0, false, false
		}
		if stop[c.ids[i]] {
			return i, true, true
		}
	}
	return need, false, true
}
