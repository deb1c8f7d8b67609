package train

import (
	"fmt"

	"dllm/model"
	"dllm/torch"
)

// net is the model being trained: float32 master weights on the device,
// each a leaf that requires grad, computed with in the compute dtype.
type net struct {
	m       *model.Model // master weights (float32)
	dtype   torch.DType  // compute dtype
	ckpt    bool         // recompute layers in the backward pass
	keep    int          // with ckpt: the last keep layers keep their activations
	chunk   int          // loss_chunk_rows
	invFreq *torch.Tensor
	distill *distiller // the frozen teacher; nil without distillation
	conf    float64    // confidence_loss_weight
	flash   bool       // the block layout through torch.Layout (flashLayout)
}

func newNet(m *model.Model, dtype torch.DType, ckpt bool, keep, chunk int) *net {
	return &net{m: m, dtype: dtype, ckpt: ckpt, keep: keep, chunk: chunk, invFreq: model.RopeFrequencies(m.Config, m.Device),
		flash: flashLayout(m.Device, dtype)}
}

func (n *net) free() {
	n.invFreq.Free()
	n.distill.free()
}

// view is the model as the forward computes with it: the master itself in
// float32; otherwise a shallow copy whose weights are w.To(dtype), recorded
// by autograd (outside NoGrad) so that gradients flow back into the float32
// leaves. release frees the copies.
func (n *net) view() (v *model.Model, release func()) {
	if n.dtype == torch.Float32 {
		return n.m, func() {}
	}
	var made []*torch.Tensor
	cast := func(t *torch.Tensor) *torch.Tensor {
		if t == nil {
			return nil
		}
		c := t.To(n.dtype, n.m.Device)
		made = append(made, c)
		return c
	}
	c := *n.m // the copy shares the master's RoPE table
	c.DType = n.dtype
	c.Embed = cast(n.m.Embed)
	c.Layers = make([]model.Layer, len(n.m.Layers))
	for i, l := range n.m.Layers {
		c.Layers[i] = model.Layer{
			Attn: torch.AttnWeights{Norm: cast(l.Attn.Norm), Q: cast(l.Attn.Q), K: cast(l.Attn.K), V: cast(l.Attn.V),
				O: cast(l.Attn.O), BQ: cast(l.Attn.BQ), BK: cast(l.Attn.BK), BV: cast(l.Attn.BV)},
			MLP: torch.MLPWeights{Norm: cast(l.MLP.Norm), Gate: cast(l.MLP.Gate), Up: cast(l.MLP.Up), Down: cast(l.MLP.Down)},
		}
	}
	c.Norm = cast(n.m.Norm)
	c.Head = c.Embed
	if n.m.Head != n.m.Embed {
		c.Head = cast(n.m.Head)
	}
	return &c, func() { torch.Free(made...) }
}

// inputs are a micro-batch's tensors on the device.
type inputs struct {
	ids, pos, mask *torch.Tensor
	// split is L for the noisy+clean layout, whose clean half never sees
	// the noisy one (torch.AttnArgs.Split), else 0.
	split int
	// layout replaces mask and split for the noisy+clean layout in half
	// precision on CUDA (torch.Layout: FlashAttention, no dense mask).
	layout *torch.Layout
}

func (in inputs) free() {
	torch.Free(in.ids, in.pos, in.mask)
	in.layout.Free()
}

// flashLayout says whether the block objective's attention runs through
// torch.Layout: on CUDA in bf16 or f16 (FlashAttention's types; 30% more
// tokens/s than the masked SDPA path, which the CPU and f32 keep).
func flashLayout(dev torch.Device, dtype torch.DType) bool {
	return dev.CUDA && (dtype == torch.BFloat16 || dtype == torch.Float16)
}

// toDevice moves a freshly made CPU tensor to dev (freeing the CPU one).
func toDevice(t *torch.Tensor, dev torch.Device) *torch.Tensor {
	if !dev.CUDA {
		return t
	}
	defer t.Free()
	return t.To(t.DType(), dev)
}

// upload builds a micro-batch's ids (B, T), positions (T) and attention
// mask (B, 1, T, T): the structural mask (base, or the batch's own) AND
// "same document"; with flash, the block objective's layout plan
// (torch.Layout) instead of the mask.
func upload(mb *microBatch, base *torch.Tensor, dev torch.Device, flash bool) inputs {
	B, T := int64(mb.B), int64(mb.T)
	in := inputs{
		ids: toDevice(torch.FromSlice(mb.ids, B, T), dev),
		pos: toDevice(torch.FromSlice(mb.pos), dev),
	}
	if flash && mb.attn == nil && mb.T == 2*mb.L {
		// The noisy half's documents (the clean half's are the same).
		docs := make([]int64, 0, mb.B*mb.L)
		for r := 0; r < mb.B; r++ {
			docs = append(docs, mb.docs[r*mb.T:r*mb.T+mb.L]...)
		}
		cpu := torch.FromSlice(docs, B, int64(mb.L))
		defer cpu.Free()
		in.layout = torch.NewLayout(cpu, mb.block, dev)
		return in
	}
	docs := toDevice(torch.FromSlice(mb.docs, B, T), dev)
	defer docs.Free()
	if mb.attn != nil {
		own := tensorMask(mb.attn, mb.T, dev)
		defer own.Free()
		base = own
	}
	in.mask = deviceMask(base, docs)
	if mb.attn == nil && mb.T == 2*mb.L {
		in.split = mb.L
	}
	return in
}

// layer is decoder layer l of v applied to x (B, T, C).
func layer(v *model.Model, l int, x *torch.Tensor, args *torch.AttnArgs) *torch.Tensor {
	a := torch.AttnBlock(x, &v.Layers[l].Attn, args)
	defer a.Free()
	return torch.MLPBlock(a, &v.Layers[l].MLP, v.Config.RMSNormEps)
}

// hidden runs v on the inputs and returns the final hidden states
// (B, T, C). Without checkpointing this is the model's own forward (every
// activation kept for autograd) and finish does nothing. With it, the
// layers run under NoGrad keeping only each layer's input (all but the
// last n.keep, which run with grad as usual); finish, called after the
// gradient has reached h's graph (which then ends at the first kept
// layer's input), walks back layer by layer: recompute the layer from its
// saved input with grad on, backpropagate the output's gradient through
// it, and hand the input's gradient to the layer before.
func (n *net) hidden(v *model.Model, in inputs) (h *torch.Tensor, finish func()) {
	if !n.ckpt {
		h, err := v.Hidden(in.ids, model.ForwardOpts{Mask: in.mask, Positions: in.pos, Split: in.split, Layout: in.layout})
		if err != nil {
			panic(&torch.Error{Op: "forward", Msg: err.Error()})
		}
		return h, func() {}
	}
	cfg := v.Config
	cos, sin := torch.RopeTables(n.invFreq, in.pos, cfg.RopeAttentionScale(), n.dtype)
	args := &torch.AttnArgs{Cos: cos, Sin: sin, Mask: in.mask, Heads: cfg.NumAttentionHeads,
		KVHeads: cfg.NumKeyValueHeads, Eps: cfg.RMSNormEps, Split: in.split, Layout: in.layout}
	// 1. Embed with grad (a lookup: its saved state is the ids).
	x0 := torch.Embedding(v.Embed, in.ids) // (B, T, C)
	// 2. The recomputed layers without grad, keeping each one's input.
	nl := len(v.Layers)
	nc := nl - min(n.keep, nl)
	xs := make([]*torch.Tensor, nc+1)
	xs[0] = x0.Detach()
	torch.NoGrad(func() {
		for l := 0; l < nc; l++ {
			xs[l+1] = layer(v, l, xs[l], args)
		}
	})
	// 3. The kept layers and the final norm with grad, from the last
	// recomputed output as a leaf.
	xs[nc].SetRequiresGrad(true)
	x := xs[nc]
	for l := nc; l < nl; l++ {
		y := layer(v, l, x, args)
		if x != xs[nc] {
			x.Free()
		}
		x = y
	}
	h = torch.RMSNorm(x, v.Norm, cfg.RMSNormEps)
	if x != xs[nc] {
		x.Free()
	}
	return h, func() {
		defer torch.Free(cos, sin, x0)
		g := xs[nc].Grad() // dL/d(input of the first kept layer)
		xs[nc].Free()
		for l := nc - 1; l >= 0; l-- {
			x := xs[l].SetRequiresGrad(true)
			out := layer(v, l, x, args) // recomputed, recorded
			out.BackwardGrad(g)
			torch.Free(out, g)
			g = x.Grad()
			x.Free()
		}
		x0.BackwardGrad(g)
		g.Free()
	}
}

// headLoss is sum_k w_k * CE(head(hd_k), ids_k) * scale over the rows of hd
// (N, C), computed rows-chunk by rows-chunk so that at most chunk x vocab
// logits exist at once, the cross-entropy in float32. With backward, each
// chunk's loss is backpropagated at once (into hd's grad and the head's).
// With dt (distillation, rows of hd = dt's targets) each chunk's loss also
// gets the distillation term of its rows, from the same float32 logits;
// that part is returned on its own as distill. With conf > 0 it also gets
// conf * scale * the sum of the entropies of the rows whose argmax is
// their target (the confidence loss), returned on its own as confl.
func (n *net) headLoss(head, hd *torch.Tensor, t *targets, scale float64, backward bool, dt *distillTargets, conf float64) (total, distill, confl float64) {
	N := int64(len(t.rows))
	if N == 0 {
		return 0, 0, 0
	}
	dev := n.m.Device
	ids := toDevice(torch.FromSlice(t.ids), dev)   // (N)
	w := toDevice(torch.FromSlice(t.weights), dev) // (N)
	defer torch.Free(ids, w)
	for s := int64(0); s < N; s += int64(n.chunk) {
		k := min(int64(n.chunk), N-s)
		var soft softTargets
		if dt != nil {
			soft = dt.soft(s, k) // (k, V): first, so that the teacher's logits are gone before the student's exist
		}
		hc := hd.Narrow(0, s, k)                                 // (k, C)
		logits := torch.Linear(hc, head, nil)                    // (k, V)
		lf := logits.To(torch.Float32, dev)                      // (k, V) float32
		tc, wc := ids.Narrow(0, s, k), w.Narrow(0, s, k)         // (k)
		ce := torch.CrossEntropy(lf, tc, -100, torch.ReduceNone) // (k)
		wce := ce.Mul(wc)                                        // (k)
		sum := wce.SumAll()                                      // ()
		l := sum.MulScalar(scale)                                // ()
		total += l.Item()
		if dt != nil {
			dl := dt.loss(soft, lf, s, k) // ()
			distill += dl.Item()
			both := l.Add(dl)
			torch.Free(l, dl)
			soft.free()
			l = both
		}
		if conf > 0 {
			cl := confidenceLoss(lf, tc, conf*scale) // ()
			confl += cl.Item()
			both := l.Add(cl)
			torch.Free(l, cl)
			l = both
		}
		// Autograd keeps what the backward pass reads (the log-softmax
		// outputs, the teacher's p), not the logits themselves: freeing them
		// first keeps two (k, V) tensors out of the backward's peak.
		torch.Free(logits, lf)
		if backward {
			l.Backward()
		}
		torch.Free(hc, tc, wc, ce, wce, sum, l)
	}
	return total, distill, confl
}

// confidenceLoss is scale * sum over the rows of logits (k, V) float32
// whose argmax is their target ids (k) of the entropy of their softmax:
// minimising it sharpens predictions that are already right and leaves
// wrong ones to the cross-entropy (LLaDA2.0's CAP loss).
func confidenceLoss(logits, ids *torch.Tensor, scale float64) *torch.Tensor {
	var tmp []*torch.Tensor
	keep := func(t *torch.Tensor) *torch.Tensor { tmp = append(tmp, t); return t }
	defer func() { torch.Free(tmp...) }()
	logp := keep(logits.LogSoftmax(1))                                      // (k, V)
	ent := keep(keep(keep(keep(logp.Exp()).Mul(logp)).Sum(1, false)).Neg()) // (k)
	right := keep(keep(keep(logits.Detach()).Argmax(1, false)).Eq(ids))     // (k) bool
	mask := keep(right.To(torch.Float32, logits.Device()))                  // (k)
	return keep(keep(ent.Mul(mask)).SumAll()).MulScalar(scale)
}

// lossParts are one micro-batch's losses, already divided by the step's
// normalisers.
type lossParts struct{ diff, ar, distill, conf float64 }

// trainMicro runs one micro-batch forward and backward: it adds to the
// master weights' gradients the gradient of
//
//	(sum_diff w_i CE_i + sum_ar w_i CE_i) / norm
//	  + weight * T^2 * sum_diff KL_i / distillNorm      (with distillation)
//	  + conf * sum_{diff, argmax right} H_i / norm      (confidence_loss_weight)
//
// and returns the four parts.
func (n *net) trainMicro(mb *microBatch, base *torch.Tensor, norm, distillNorm float64) (lp lossParts, err error) {
	defer torch.Recover(&err)
	nd, na := len(mb.diff.rows), len(mb.ar.rows)
	if nd+na == 0 {
		return lp, nil
	}
	v, release := n.view()
	defer release()
	// 1. The teacher's hidden states for the diff targets (NoGrad; nil
	// without distillation), before the student's activations exist.
	dt := n.distill.targets(mb, distillNorm)
	defer dt.free()
	in := upload(mb, base, n.m.Device, n.flash)
	defer in.free()
	// 2. Forward to the final hidden states.
	h, finish := n.hidden(v, in) // (B, T, C)
	C := h.Size(2)
	// 3. Gather the rows that predict a target: (nd+na, C).
	flat := h.Reshape(int64(mb.B*mb.T), C)
	rows := toDevice(torch.FromSlice(append(append([]int64(nil), mb.diff.rows...), mb.ar.rows...)), n.m.Device)
	hsel := flat.IndexSelect(0, rows)
	torch.Free(flat, rows, h)
	// 4. The head and the loss, chunk by chunk, backpropagated into hd.
	hd := hsel.Detach().SetRequiresGrad(true)
	dpart, apart := hd.Narrow(0, 0, int64(nd)), hd.Narrow(0, int64(nd), int64(na))
	lp.diff, lp.distill, lp.conf = n.headLoss(v.Head, dpart, &mb.diff, 1/norm, true, dt, n.conf)
	lp.ar, _, _ = n.headLoss(v.Head, apart, &mb.ar, 1/norm, true, nil, 0)
	torch.Free(dpart, apart)
	// 5. On through the body.
	g := hd.Grad()
	hsel.BackwardGrad(g)
	torch.Free(g, hd, hsel)
	finish()
	return lp, nil
}

// evalMicro is trainMicro's loss without gradients.
func (n *net) evalMicro(mb *microBatch, base *torch.Tensor, norm float64) (lp lossParts, err error) {
	defer torch.Recover(&err)
	if len(mb.diff.rows)+len(mb.ar.rows) == 0 {
		return lp, nil
	}
	torch.NoGrad(func() {
		v, release := n.view()
		defer release()
		in := upload(mb, base, n.m.Device, n.flash)
		defer in.free()
		h, err := v.Hidden(in.ids, model.ForwardOpts{Mask: in.mask, Positions: in.pos, Split: in.split, Layout: in.layout})
		if err != nil {
			panic(&torch.Error{Op: "forward", Msg: err.Error()})
		}
		flat := h.Reshape(int64(mb.B*mb.T), h.Size(2))
		for _, part := range []struct {
			t   *targets
			out *float64
		}{{&mb.diff, &lp.diff}, {&mb.ar, &lp.ar}} {
			if len(part.t.rows) == 0 {
				continue
			}
			rows := toDevice(torch.FromSlice(part.t.rows), n.m.Device)
			hs := flat.IndexSelect(0, rows)
			*part.out, _, _ = n.headLoss(v.Head, hs, part.t, 1/norm, false, nil, 0)
			torch.Free(rows, hs)
		}
		torch.Free(flat, h)
	})
	return lp, nil
}

// namedParam is a master weight with its HF name.
type namedParam struct {
	name string
	t    *torch.Tensor
}

// namedParams lists m's weights under their HF names, each once (a tied
// head is the embedding).
func namedParams(m *model.Model) []namedParam {
	ps := []namedParam{{"model.embed_tokens.weight", m.Embed}}
	for i := range m.Layers {
		a, f := &m.Layers[i].Attn, &m.Layers[i].MLP
		p := fmt.Sprintf("model.layers.%d.", i)
		ps = append(ps,
			namedParam{p + "input_layernorm.weight", a.Norm},
			namedParam{p + "self_attn.q_proj.weight", a.Q},
			namedParam{p + "self_attn.k_proj.weight", a.K},
			namedParam{p + "self_attn.v_proj.weight", a.V},
			namedParam{p + "self_attn.o_proj.weight", a.O})
		if a.BQ != nil {
			ps = append(ps,
				namedParam{p + "self_attn.q_proj.bias", a.BQ},
				namedParam{p + "self_attn.k_proj.bias", a.BK},
				namedParam{p + "self_attn.v_proj.bias", a.BV})
		}
		ps = append(ps,
			namedParam{p + "post_attention_layernorm.weight", f.Norm},
			namedParam{p + "mlp.gate_proj.weight", f.Gate},
			namedParam{p + "mlp.up_proj.weight", f.Up},
			namedParam{p + "mlp.down_proj.weight", f.Down})
	}
	ps = append(ps, namedParam{"model.norm.weight", m.Norm})
	if m.Head != m.Embed {
		ps = append(ps, namedParam{"lm_head.weight", m.Head})
	}
	return ps
}
