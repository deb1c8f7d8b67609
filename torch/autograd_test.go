package torch

import (
	"math"
	"testing"
)

// fdCheck compares the autograd gradient of loss() with respect to p against
// central finite differences on a few coordinates (float64 throughout).
func fdCheck(t *testing.T, name string, p *Tensor, loss func() *Tensor) {
	t.Helper()
	p.ZeroGrad()
	l := loss()
	l.Backward()
	grad := f64(p.Grad())
	vals := f64(p)
	shape := p.Shape()
	const h = 1e-6
	for _, i := range []int{0, len(vals) / 3, len(vals) / 2, len(vals) - 1} {
		set := func(v float64) {
			w := append([]float64(nil), vals...)
			w[i] = v
			NoGrad(func() { p.CopyFrom(FromSlice(w, shape...)) })
		}
		set(vals[i] + h)
		up := loss().Item()
		set(vals[i] - h)
		down := loss().Item()
		set(vals[i])
		fd := (up - down) / (2 * h)
		if math.Abs(fd-grad[i]) > 1e-6*(1+math.Abs(fd)) {
			t.Fatalf("%s: d/dp[%d] autograd %v, finite difference %v", name, i, grad[i], fd)
		}
	}
}

func TestGradientsMatchFiniteDifferences(t *testing.T) {
	x := FromSlice(randSlice(20, 4*6), 4, 6)
	w1 := FromSlice(randSlice(21, 5*6), 5, 6).SetRequiresGrad(true)
	w2 := FromSlice(randSlice(22, 3*5), 3, 5).SetRequiresGrad(true)
	targets := FromSlice([]int64{0, 2, -100, 1})
	loss := func() *Tensor {
		h := Linear(x, w1, nil).Silu()
		return CrossEntropy(Linear(h, w2, nil), targets, -100, ReduceMean)
	}
	fdCheck(t, "mlp w1", w1, loss)
	fdCheck(t, "mlp w2", w2, loss)

	// Softmax, RMSNorm, RoPE, attention: one scalar through each.
	a := FromSlice(randSlice(23, 2*4*8), 2, 4, 8).SetRequiresGrad(true)
	nw := FromSlice(randSlice(24, 8))
	inv := FromSlice([]float64{1, 0.3, 0.1, 0.01})
	cos, sin := RopeTables(inv, Arange(0, 4, Int64, CPU), 1, Float64)
	r := FromSlice(randSlice(25, 2*4*8), 1, 2, 4, 8)
	fdCheck(t, "norm+rope+attention", a, func() *Tensor {
		h := RMSNorm(a, nw, 1e-6).Reshape(1, 2, 4, 8)
		q := Rope(h, cos, sin)
		y := SDPA(q, q, h, AttnOpts{Causal: true, Impl: AttnMath})
		return y.Mul(r).SumAll().Add(y.LogSoftmax(-1).MeanAll())
	})
}

// llamaLayer builds random float64 weights of one small Llama layer.
func llamaLayer(seed uint64, C, H, Hkv, D, F int) (*AttnWeights, *MLPWeights) {
	m := func(s uint64, r, c int) *Tensor {
		return FromSlice(randSlice(seed+s, r*c), int64(r), int64(c)).MulScalar(0.3)
	}
	aw := &AttnWeights{Norm: FromSlice(randSlice(seed, C)).AddScalar(1), Q: m(1, H*D, C), K: m(2, Hkv*D, C),
		V: m(3, Hkv*D, C), O: m(4, C, H*D)}
	mw := &MLPWeights{Norm: FromSlice(randSlice(seed+5, C)).AddScalar(1), Gate: m(6, F, C), Up: m(7, F, C), Down: m(8, C, F)}
	return aw, mw
}

func TestFusedBlocksGradients(t *testing.T) {
	const C, H, Hkv, D, F, T = 16, 4, 2, 4, 24, 5
	aw, mw := llamaLayer(30, C, H, Hkv, D, F)
	for _, w := range []*Tensor{aw.Q, aw.Norm, mw.Norm, mw.Gate, mw.Up, mw.Down} {
		w.SetRequiresGrad(true)
	}
	x := FromSlice(randSlice(40, T*C), 1, T, C).SetRequiresGrad(true)
	cos, sin := RopeTables(FromSlice([]float64{1, 0.1}), Arange(0, T, Int64, CPU), 1, Float64)
	r := FromSlice(randSlice(41, T*C), 1, T, C)
	loss := func() *Tensor {
		h := AttnBlock(x, aw, &AttnArgs{Cos: cos, Sin: sin, Causal: true, Heads: H, KVHeads: Hkv, Eps: 1e-6})
		return MLPBlock(h, mw, 1e-6).Mul(r).SumAll()
	}
	fdCheck(t, "block x", x, loss)
	fdCheck(t, "block wq", aw.Q, loss)
	fdCheck(t, "block w_up", mw.Up, loss)
	fdCheck(t, "block w_gate", mw.Gate, loss)
	fdCheck(t, "block w_down", mw.Down, loss)
	fdCheck(t, "block attention norm", aw.Norm, loss)
	fdCheck(t, "block mlp norm", mw.Norm, loss)
}

func TestAttnBlockMatchesPrimitives(t *testing.T) {
	const B, C, H, Hkv, D, F, T = 2, 16, 4, 2, 4, 24, 6
	aw, _ := llamaLayer(50, C, H, Hkv, D, F)
	x := FromSlice(randSlice(51, B*T*C), B, T, C)
	cos, sin := RopeTables(FromSlice([]float64{1, 0.1}), Arange(0, T, Int64, CPU), 1, Float64)
	// The same sublayer from primitives.
	h := RMSNorm(x, aw.Norm, 1e-6)
	q := Linear(h, aw.Q, nil).Reshape(B, T, H, D).Transpose(1, 2)
	k := Linear(h, aw.K, nil).Reshape(B, T, Hkv, D).Transpose(1, 2)
	v := Linear(h, aw.V, nil).Reshape(B, T, Hkv, D).Transpose(1, 2)
	y := SDPA(Rope(q, cos, sin), Rope(k, cos, sin), v, AttnOpts{Causal: true})
	want := x.Add(Linear(y.Transpose(1, 2).Reshape(B, T, H*D), aw.O, nil))
	got := AttnBlock(x, aw, &AttnArgs{Cos: cos, Sin: sin, Causal: true, Heads: H, KVHeads: Hkv, Eps: 1e-6})
	closeTo(t, "attn block", f64(got), f64(want), 1e-12)

	// Through a KV cache in two chunks (3 + 3 tokens) the output is the same.
	kc := Zeros([]int64{B, Hkv, 16, D}, Float64, CPU)
	vc := Zeros([]int64{B, Hkv, 16, D}, Float64, CPU)
	var parts []*Tensor
	for _, c := range [][2]int64{{0, 3}, {3, 3}} {
		part := AttnBlock(x.Narrow(1, c[0], c[1]), aw, &AttnArgs{Cos: cos.Narrow(0, c[0], c[1]), Sin: sin.Narrow(0, c[0], c[1]),
			Causal: true, Heads: H, KVHeads: Hkv, Eps: 1e-6, KCache: kc, VCache: vc, Pos: c[0]})
		parts = append(parts, part)
	}
	closeTo(t, "attn block with cache", f64(Cat(1, parts...)), f64(want), 1e-12)
	if err := Try(func() {
		AttnBlock(x, aw, &AttnArgs{Cos: cos, Sin: sin, Heads: H, KVHeads: Hkv, KCache: kc, VCache: vc, Pos: 12})
	}); err == nil {
		t.Fatal("writing past the cache should fail")
	}
}

func TestNoGrad(t *testing.T) {
	w := FromSlice([]float64{1, 2}).SetRequiresGrad(true)
	if !w.MulScalar(2).RequiresGrad() {
		t.Fatal("op on a leaf that requires grad should require grad")
	}
	NoGrad(func() {
		if GradEnabled() {
			t.Fatal("grad mode on inside NoGrad")
		}
		if w.MulScalar(2).RequiresGrad() {
			t.Fatal("op inside NoGrad recorded history")
		}
	})
}

func TestAdamWConverges(t *testing.T) {
	// Least squares y = X w* + b*: AdamW must drive the loss to near zero.
	X := FromSlice(randSlice(60, 64*3), 64, 3)
	wStar := FromSlice([]float64{1.5, -2, 0.5}, 1, 3)
	y := Linear(X, wStar, FromSlice([]float64{0.3}))
	w := Zeros([]int64{1, 3}, Float64, CPU).SetRequiresGrad(true)
	b := Zeros([]int64{1}, Float64, CPU).SetRequiresGrad(true)
	opt := NewAdamW([]*Tensor{w, b}, AdamWConfig{LR: 0.05})
	defer opt.Close()
	var loss float64
	for step := 0; step < 600; step++ {
		opt.ZeroGrad()
		d := Linear(X, w, b).Sub(y)
		l := d.Mul(d).MeanAll()
		l.Backward()
		ClipGradNorm([]*Tensor{w, b}, 10)
		opt.Step()
		loss = l.Item()
		if step == 400 {
			opt.SetLR(0.01)
		}
	}
	if loss > 1e-4 {
		t.Fatalf("AdamW did not converge: loss %v", loss)
	}
	closeTo(t, "fitted w", f64(w), []float64{1.5, -2, 0.5}, 2e-2)
}

func TestClipGradNorm(t *testing.T) {
	p := FromSlice([]float64{3, 4}).SetRequiresGrad(true)
	p.Mul(p).SumAll().MulScalar(0.5).Backward() // grad = p = (3, 4), norm 5
	if n := ClipGradNorm([]*Tensor{p}, 1); math.Abs(n-5) > 1e-12 {
		t.Fatalf("norm %v, want 5", n)
	}
	closeTo(t, "clipped grad", f64(p.Grad()), []float64{0.6, 0.8}, 1e-6)
}

func TestAdamWMatchesFormula(t *testing.T) {
	// Two updates by hand: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g²,
	// p -= lr (p wd + m/(1-b1^k) / (sqrt(v/(1-b2^k)) + eps)).
	p0 := []float64{0.5, -1, 2}
	p := FromSlice(p0).To(Float32, CPU).SetRequiresGrad(true)
	c := AdamWConfig{LR: 0.1, Beta1: 0.8, Beta2: 0.9, Eps: 1e-3, WeightDecay: 0.05}
	opt := NewAdamW([]*Tensor{p}, c)
	defer opt.Close()
	want := append([]float64(nil), p0...)
	m, v := make([]float64, 3), make([]float64, 3)
	for k := 1; k <= 2; k++ {
		opt.ZeroGrad()
		p.Mul(p).Mul(p).SumAll().Backward() // g = 3 p²
		opt.Step()
		for i := range want {
			g := 3 * want[i] * want[i]
			m[i] = c.Beta1*m[i] + (1-c.Beta1)*g
			v[i] = c.Beta2*v[i] + (1-c.Beta2)*g*g
			mh := m[i] / (1 - math.Pow(c.Beta1, float64(k)))
			vh := v[i] / (1 - math.Pow(c.Beta2, float64(k)))
			want[i] -= c.LR * (want[i]*c.WeightDecay + mh/(math.Sqrt(vh)+c.Eps))
		}
	}
	closeTo(t, "adamw", f64(p), want, 1e-5)
	closeTo(t, "adamw m", f64(opt.M[0]), m, 1e-5)
	if opt.Steps != 2 {
		t.Fatalf("steps %d", opt.Steps)
	}
	// A parameter without a gradient is left alone.
	q := FromSlice([]float64{1}).SetRequiresGrad(true)
	o2 := NewAdamW([]*Tensor{q}, AdamWConfig{LR: 1})
	o2.Step()
	closeTo(t, "untouched", f64(q), []float64{1}, 0)
}

func TestBackwardGradAndDetach(t *testing.T) {
	// backward(y, g) accumulates the same gradient as backward(sum(y*g)).
	x := FromSlice(randSlice(70, 6), 2, 3).SetRequiresGrad(true)
	g := FromSlice(randSlice(71, 6), 2, 3)
	y := x.Silu().Mul(x)
	y.BackwardGrad(g)
	got := f64(x.Grad())
	x.ZeroGrad()
	x.Silu().Mul(x).Mul(g).SumAll().Backward()
	closeTo(t, "vjp", got, f64(x.Grad()), 1e-12)
	d := y.Detach()
	if d.RequiresGrad() {
		t.Fatal("detached tensor requires grad")
	}
	closeTo(t, "detach values", f64(d), f64(y), 0)
}

// TestAttnBlockSplit: with a mask under which rows from Split on see no key
// before Split (the noisy+clean training layout), the split attention gives
// the same output and the same gradients as one attention over the whole
// mask, and a split without a mask is refused.
func TestAttnBlockSplit(t *testing.T) {
	const B, C, H, Hkv, D, F, L = 2, 16, 4, 2, 4, 24, 6
	aw, _ := llamaLayer(70, C, H, Hkv, D, F)
	x := FromSlice(randSlice(71, B*2*L*C), B, 2*L, C).SetRequiresGrad(true)
	cos, sin := RopeTables(FromSlice([]float64{1, 0.1}), Arange(0, 2*L, Int64, CPU), 1, Float64)
	// Rows [0, L) see blocks of 2 of their own half and the other half
	// before their block; rows [L, 2L) see their half causally.
	m := make([]bool, 4*L*L)
	for i := 0; i < 2*L; i++ {
		for j := 0; j < 2*L; j++ {
			switch {
			case i < L && j < L:
				m[i*2*L+j] = i/2 == j/2
			case i < L:
				m[i*2*L+j] = (j-L)/2 < i/2
			default:
				m[i*2*L+j] = j >= L && j <= i
			}
		}
	}
	mask := FromSlice(m, 1, 1, 2*L, 2*L)
	r := FromSlice(randSlice(72, B*2*L*C), B, 2*L, C)
	run := func(split int) (out, gx, gq *Tensor) {
		x.ZeroGrad()
		aw.Q.SetRequiresGrad(true)
		aw.Q.ZeroGrad()
		out = AttnBlock(x, aw, &AttnArgs{Cos: cos, Sin: sin, Mask: mask, Heads: H, KVHeads: Hkv, Eps: 1e-6, Split: split})
		out.Mul(r).SumAll().Backward()
		return out.Detach(), x.Grad().Clone(), aw.Q.Grad().Clone()
	}
	o0, x0, q0 := run(0)
	o1, x1, q1 := run(L)
	closeTo(t, "split output", f64(o1), f64(o0), 1e-12)
	closeTo(t, "split grad x", f64(x1), f64(x0), 1e-12)
	closeTo(t, "split grad wq", f64(q1), f64(q0), 1e-12)
	if err := Try(func() {
		AttnBlock(x, aw, &AttnArgs{Cos: cos, Sin: sin, Causal: true, Heads: H, KVHeads: Hkv, Eps: 1e-6, Split: L})
	}); err == nil {
		t.Fatal("a split without a mask should be refused")
	}
}
