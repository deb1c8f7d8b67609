package torch

import (
	"fmt"
	"math"
	"testing"
)

// layoutMask is the (2L, 2L) mask NewLayout promises, built by hand from
// its definition: rows and columns [noisy 0..L-1 ; clean 0..L-1].
func layoutMask(docs []int64, bs int) []bool {
	L := len(docs)
	T := 2 * L
	m := make([]bool, T*T)
	for i := 0; i < L; i++ {
		for j := 0; j < L; j++ {
			same := docs[i] == docs[j]
			m[(L+i)*T+L+j] = same && j <= i  // clean -> clean
			m[i*T+j] = same && j/bs == i/bs  // noisy -> noisy
			m[i*T+L+j] = same && j/bs < i/bs // noisy -> clean
		}
	}
	return m
}

// spans turns document lengths into ids.
func spans(lens ...int) []int64 {
	var ids []int64
	for d, n := range lens {
		for range n {
			ids = append(ids, int64(d))
		}
	}
	return ids
}

// attnRun is one AttnBlock forward and backward of sum(out * r): the output
// and the gradients of x and the q, k and v projections.
func attnRun(x, r *Tensor, aw *AttnWeights, a *AttnArgs) []*Tensor {
	for _, p := range []*Tensor{x, aw.Q, aw.K, aw.V} {
		p.SetRequiresGrad(true)
		p.ZeroGrad()
	}
	out := AttnBlock(x, aw, a)
	out.Mul(r).SumAll().Backward()
	return []*Tensor{out.Detach(), x.Grad().Clone(), aw.Q.Grad().Clone(), aw.K.Grad().Clone(), aw.V.Grad().Clone()}
}

// The layout path (FlashAttention's decomposition, on reference maths on
// the CPU) equals the dense masked attention, output and gradients, in
// float64: documents that start inside blocks, one shorter than a block, a
// last partial block, one block only (no part 2), blocks of 1.
func TestAttnBlockLayout(t *testing.T) {
	const C, H, Hkv, D, F = 16, 4, 2, 4, 24
	aw, _ := llamaLayer(80, C, H, Hkv, D, F)
	for _, tc := range []struct {
		bs   int
		docs [][]int64
	}{
		{4, [][]int64{spans(5, 2, 14), spans(21)}},
		{4, [][]int64{spans(3, 9, 1, 8)}},
		{8, [][]int64{spans(8), spans(3, 5)}},
		{1, [][]int64{spans(4, 5)}},
		{32, [][]int64{spans(10, 20, 7)}},
	} {
		t.Run(fmt.Sprintf("bs%d_L%d_B%d", tc.bs, len(tc.docs[0]), len(tc.docs)), func(t *testing.T) {
			B, L := len(tc.docs), len(tc.docs[0])
			x := FromSlice(randSlice(81, B*2*L*C), int64(B), int64(2*L), C)
			r := FromSlice(randSlice(82, B*2*L*C), int64(B), int64(2*L), C)
			pos := make([]int64, 2*L)
			for i := range pos {
				pos[i] = int64(i % L)
			}
			cos, sin := RopeTables(FromSlice([]float64{1, 0.1}), FromSlice(pos), 1, Float64)
			var m []bool
			var flat []int64
			for _, d := range tc.docs {
				m = append(m, layoutMask(d, tc.bs)...)
				flat = append(flat, d...)
			}
			mask := FromSlice(m, int64(B), 1, int64(2*L), int64(2*L))
			docs := FromSlice(flat, int64(B), int64(L))
			lay := NewLayout(docs, tc.bs, CPU)
			defer lay.Free()
			want := attnRun(x, r, aw, &AttnArgs{Cos: cos, Sin: sin, Mask: mask, Heads: H, KVHeads: Hkv, Eps: 1e-6})
			got := attnRun(x, r, aw, &AttnArgs{Cos: cos, Sin: sin, Layout: lay, Heads: H, KVHeads: Hkv, Eps: 1e-6})
			for i, name := range []string{"output", "grad x", "grad wq", "grad wk", "grad wv"} {
				closeTo(t, name, f64(got[i]), f64(want[i]), 1e-12)
			}
		})
	}
}

func TestLayoutRefusals(t *testing.T) {
	aw, _ := llamaLayer(80, 16, 4, 2, 4, 24)
	x := FromSlice(randSlice(81, 4*16), 1, 4, 16)
	cos, sin := RopeTables(FromSlice([]float64{1, 0.1}), Arange(0, 4, Int64, CPU), 1, Float64)
	lay := NewLayout(FromSlice(spans(2), 1, 2), 2, CPU)
	defer lay.Free()
	for name, f := range map[string]func(){
		"docs not int64": func() { NewLayout(FromSlice([]float64{0, 0}, 1, 2), 2, CPU) },
		"block 0":        func() { NewLayout(FromSlice(spans(2), 1, 2), 0, CPU) },
		"layout and mask": func() {
			AttnBlock(x, aw, &AttnArgs{Cos: cos, Sin: sin, Causal: true, Layout: lay, Heads: 4, KVHeads: 2})
		},
		"wrong length": func() {
			x6 := FromSlice(randSlice(81, 6*16), 1, 6, 16)
			c6, s6 := RopeTables(FromSlice([]float64{1, 0.1}), Arange(0, 6, Int64, CPU), 1, Float64)
			AttnBlock(x6, aw, &AttnArgs{Cos: c6, Sin: s6, Layout: lay, Heads: 4, KVHeads: 2})
		},
	} {
		if err := Try(f); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// relErr is ||got - want|| / ||want|| over all elements.
func relErr(got, want *Tensor) float64 {
	g, w := f64(got.To(Float64, CPU)), f64(want.To(Float64, CPU))
	var num, den float64
	for i := range w {
		num += (g[i] - w[i]) * (g[i] - w[i])
		den += w[i] * w[i]
	}
	return math.Sqrt(num / den)
}

// On the GPU the layout path is FlashAttention: in bf16 at MiniCPM5-2B's
// head shape it must be as close to the float32 masked reference, output
// and gradients, as the bf16 masked path is (within 1.5x).
func TestAttnBlockLayoutCUDA(t *testing.T) {
	if !CUDAAvailable() {
		t.Skip("no CUDA device")
	}
	const C, H, Hkv, D, F, bs = 512, 16, 2, 128, 24, 32
	dev := CUDA(0)
	aw64, _ := llamaLayer(90, C, H, Hkv, D, F)
	docs := [][]int64{spans(40, 20, 240), spans(300)}
	B, L := len(docs), len(docs[0])
	var m []bool
	var flat []int64
	for _, d := range docs {
		m = append(m, layoutMask(d, bs)...)
		flat = append(flat, d...)
	}
	mask := FromSlice(m, int64(B), 1, int64(2*L), int64(2*L)).To(Bool, dev)
	lay := NewLayout(FromSlice(flat, int64(B), int64(L)), bs, dev)
	defer lay.Free()
	pos := make([]int64, 2*L)
	for i := range pos {
		pos[i] = int64(i % L)
	}
	inv := make([]float64, D/2)
	for i := range inv {
		inv[i] = math.Pow(5e6, -float64(2*i)/D)
	}
	x64 := FromSlice(randSlice(91, B*2*L*C), int64(B), int64(2*L), C)
	r64 := FromSlice(randSlice(92, B*2*L*C), int64(B), int64(2*L), C)
	run := func(dt DType, layout bool) []*Tensor {
		c := func(t *Tensor) *Tensor { return t.To(dt, dev) }
		aw := &AttnWeights{Norm: c(aw64.Norm), Q: c(aw64.Q.MulScalar(0.2)), K: c(aw64.K.MulScalar(0.2)), V: c(aw64.V), O: c(aw64.O)}
		cos, sin := RopeTables(FromSlice(inv).To(Float32, dev), FromSlice(pos).To(Int64, dev), 1, dt)
		a := &AttnArgs{Cos: cos, Sin: sin, Heads: H, KVHeads: Hkv, Eps: 1e-6}
		if layout {
			a.Layout = lay
		} else {
			a.Mask = mask
		}
		return attnRun(c(x64), c(r64), aw, a)
	}
	want := run(Float32, false)
	masked := run(BFloat16, false)
	got := run(BFloat16, true)
	for i, name := range []string{"output", "grad x", "grad wq", "grad wk", "grad wv"} {
		em, el := relErr(masked[i], want[i]), relErr(got[i], want[i])
		t.Logf("%-8s bf16 vs float32: masked SDPA %.2e, layout %.2e", name, em, el)
		if !(el <= 1.5*em+1e-4) {
			t.Errorf("%s: layout path %.2e from float32, masked bf16 path %.2e", name, el, em)
		}
	}
}
