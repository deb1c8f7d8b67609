package diffusion

import (
	"math"
	"slices"

	"dllm/torch"
)

// nucleusCap bounds the candidates the top-p cut looks at: the nucleus is
// found among the nucleusCap most likely tokens, so a nucleus that would be
// larger (a nearly flat distribution) is cut there.
const nucleusCap = 1024

// picker chooses each position's candidate token and its probability on the
// device, so that a step copies two numbers per position to the host.
// Sampling draws from a generator of the generation's own, seeded with
// Options.Seed, so that generations running side by side (Batcher) each
// reproduce their seed.
type picker struct {
	dev         torch.Device
	mask        int64 // never proposed; -1 for none
	temperature float64
	topP        float64          // < 1: nucleus sampling
	gen         *torch.Generator // sampling's; nil when greedy
}

func newPicker(p plan, dev torch.Device) *picker {
	pk := &picker{dev: dev, mask: p.mask, temperature: p.temperature, topP: p.topP}
	if p.temperature > 0 {
		pk.gen = torch.NewGenerator(p.seed, dev)
	}
	return pk
}

func (pk *picker) free() {
	pk.gen.Free()
}

// samples says whether two pickers draw the same way (the Batcher samples
// the rows of such pickers together).
func (pk *picker) samples(o *picker) bool {
	return pk.temperature == o.temperature && pk.topP == o.topP && pk.mask == o.mask
}

// logitRows is a forward's logit rows (n, V) on the device and, where the
// Batcher picked a whole step's rows greedily at once (one kernel and one
// copy for every sequence), each row's greedy pick on the host: tok and
// conf, nil otherwise. A greedy generation then needs no pick of its own.
type logitRows struct {
	t    *torch.Tensor
	tok  []int64
	conf []float64
	// picked is, where the forward was asked for a pickSpec whose draw
	// the Batcher made beside other sequences', that draw.
	picked *picks
}

// pickSpec is the pick a generation will make of a forward's logits:
// first (a row (1, V) of an earlier forward, the carry) when not nil, then
// the forward's rows [lo, hi), drawn by pick as picker.start draws them.
type pickSpec struct {
	pick   *picker
	first  *torch.Tensor
	lo, hi int
}

// rows is how many rows the pick draws: first's, then [lo, hi).
func (s *pickSpec) rows() int {
	if s.first != nil {
		return s.hi - s.lo + 1
	}
	return s.hi - s.lo
}

// narrow is rows [i, i+n), t a view of its own to free.
func (l logitRows) narrow(i, n int64) logitRows {
	r := logitRows{t: l.t.Narrow(0, i, n)}
	if l.tok != nil {
		r.tok, r.conf = l.tok[i:i+n], l.conf[i:i+n]
	}
	return r
}

// clone is l in storage of its own.
func (l logitRows) clone() logitRows {
	return logitRows{t: l.t.Clone(), tok: slices.Clone(l.tok), conf: slices.Clone(l.conf)}
}

func (l logitRows) free() { l.t.Free() }

// picks is a step's candidates on their way to the host (picker.start).
type picks struct {
	dev *torch.Tensor            // (2n) float64: probabilities, then ids
	c   *torch.HostCopy[float64] // dev's copy
	// tok and conf are picks already on the host (dev and c nil): see
	// generation.predictChecked.
	tok  []int64
	conf []float64
}

// wait returns the candidates and their probabilities: a step's one host
// sync.
func (p *picks) wait() (tok []int64, conf []float64) {
	if p.c == nil {
		return p.tok, p.conf
	}
	p.dev.Free()
	return splitPicks(p.c.Wait())
}

// splitPicks reads picks in their device layout, (2n) float64:
// probabilities, then ids.
func splitPicks(host []float64) (tok []int64, conf []float64) {
	n := len(host) / 2
	tok = make([]int64, n)
	for i := range tok {
		tok[i] = int64(host[n+i])
	}
	return tok, host[:n]
}

// free drops picks that will not be waited for.
func (p *picks) free() {
	if p.c != nil {
		p.dev.Free()
		p.c.Free()
	}
}

// pick returns, for each row of first (1, V), when not nil, and then of
// rows (n, V), a candidate token and its probability under the
// distribution it was drawn from (softmax(logits/T) renormalised over the
// nucleus; plain softmax when greedy).
func (pk *picker) pick(first *logitRows, rows logitRows) (tok []int64, conf []float64) {
	return pk.start(first, rows).wait()
}

// start is pick up to the copy to the host, which it leaves on its way;
// greedy picks the Batcher made are returned as they are.
func (pk *picker) start(first *logitRows, rows logitRows) *picks {
	if pk.temperature == 0 && rows.tok != nil && (first == nil || first.tok != nil) {
		p := &picks{}
		if first != nil {
			p.tok, p.conf = slices.Clone(first.tok), slices.Clone(first.conf)
		}
		p.tok, p.conf = append(p.tok, rows.tok...), append(p.conf, rows.conf...)
		return p
	}
	var firstT *torch.Tensor
	if first != nil {
		firstT = first.t
	}
	return pk.startDevice(firstT, rows.t)
}

// startDevice is start's pick on the device.
func (pk *picker) startDevice(first, logits *torch.Tensor) *picks {
	var tmp []*torch.Tensor
	keep := func(t *torch.Tensor) *torch.Tensor { tmp = append(tmp, t); return t }
	defer func() { torch.Free(tmp...) }()
	if first != nil && logits.Size(0) == 0 {
		first, logits = nil, first
	}
	n := logits.Size(0)
	if first != nil {
		n++
	}
	// The mask token is what the model reads, never what it writes.
	var both *torch.Tensor // (2n) float64: probabilities, then ids
	switch {
	case pk.temperature == 0 && first != nil:
		// The greedy kernel reads first's row where it is: no stacked copy.
		both = keep(torch.PickGreedyAfter(keep(first.To(first.DType(), pk.dev)),
			keep(logits.To(logits.DType(), pk.dev)), pk.mask))
	case pk.temperature == 0:
		both = keep(torch.PickGreedy(keep(logits.To(logits.DType(), pk.dev)), pk.mask))
	default:
		if first != nil {
			logits = keep(torch.Cat(0, first, logits))
		}
		u := keep(pk.gen.Rand([]int64{n, logits.Size(1)}, torch.Float32))
		both = keep(pk.sample(logits, u))
	}
	both = both.To(torch.Float64, pk.dev) // a handle of its own, past tmp's frees
	return &picks{dev: both, c: torch.StartToSlice[float64](both)}
}

// sample draws a token for each row of logits (n, V) from softmax(logits/T)
// (over the nucleus when topP < 1; never the mask token) by Gumbel-max with
// the uniform noise u (n, V): argmax(log p + G), G = -log(-log u), a draw
// from p in a fixed number of kernels and without a sort. It returns (2n)
// float64: the drawn tokens' probabilities, then their ids. Every
// operation works row by row, so a row's draw does not depend on the rows
// beside it (the Batcher samples many sequences' rows at once). Each (n,
// V) temporary is freed as soon as the next one is made: a batch's rows
// make them large (Batcher.pickAll's passes), and at most two are alive
// beside logp and u.
func (pk *picker) sample(logits, u *torch.Tensor) *torch.Tensor {
	var tmp []*torch.Tensor
	keep := func(t *torch.Tensor) *torch.Tensor { tmp = append(tmp, t); return t }
	defer func() { torch.Free(tmp...) }()
	n := logits.Size(0)
	l := keep(logits.To(torch.Float32, pk.dev)) // (n, V)
	if pk.mask >= 0 {
		col := l.Narrow(1, pk.mask, 1) // a view, freed at once: it would keep l alive
		col.Fill(math.Inf(-1))
		col.Free()
	}
	scaled := keep(l.DivScalar(pk.temperature))
	l.Free()
	logp := keep(scaled.LogSoftmax(1))
	scaled.Free()
	if pk.topP < 1 {
		nuc := keep(pk.nucleus(logp))
		logp.Free()
		logp = nuc
	}
	g := keep(u.Log())
	for _, f := range []func(*torch.Tensor) *torch.Tensor{(*torch.Tensor).Neg, (*torch.Tensor).Log, (*torch.Tensor).Neg} {
		next := keep(f(g))
		g.Free()
		g = next
	}
	sum := keep(logp.Add(g))
	g.Free()
	ids := keep(sum.Argmax(1, false)) // (n) int64
	sum.Free()
	col := keep(ids.Reshape(n, 1))
	p := keep(keep(keep(logp.Gather(1, col)).Exp()).Reshape(n)) // (n) float32
	return torch.Cat(0, keep(p.To(torch.Float64, pk.dev)), keep(ids.To(torch.Float64, pk.dev)))
}

// nucleus keeps, per row of log-probabilities (n, V), the most likely tokens
// whose mass reaches topP (the first one that crosses it included) and
// renormalises over them; the rest become -inf.
func (pk *picker) nucleus(logp *torch.Tensor) *torch.Tensor {
	var tmp []*torch.Tensor
	keep := func(t *torch.Tensor) *torch.Tensor { tmp = append(tmp, t); return t }
	defer func() { torch.Free(tmp...) }()
	k := min(nucleusCap, logp.Size(1))
	vals, idx := logp.TopK(int(k), 1) // (n, K), largest first
	keep(vals)
	keep(idx)
	prob := keep(vals.Exp())
	above := keep(keep(prob.Cumsum(1)).Sub(prob)) // (n, K) mass ranked above each
	// Zero-probability entries (the mask's -inf) are never in the nucleus.
	out := keep(keep(above.GeScalar(pk.topP)).Or(keep(prob.EqScalar(0))))
	cut := keep(keep(vals.MaskedFill(out, math.Inf(1))).Min(1, true)) // (n, 1) least kept log-prob
	below := keep(logp.Lt(cut))                                       // (n, V)
	kept := keep(logp.MaskedFill(below, math.Inf(-1)))
	below.Free()
	return kept.LogSoftmax(1)
}
