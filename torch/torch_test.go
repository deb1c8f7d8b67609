package torch

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if err := Load(); err != nil {
		// A missing shim is a build problem, not a test result: say how to fix.
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// randSlice is deterministic pseudo-random data in [-1, 1).
func randSlice(seed uint64, n int) []float64 {
	r := rand.New(rand.NewPCG(seed, 7))
	v := make([]float64, n)
	for i := range v {
		v[i] = 2*r.Float64() - 1
	}
	return v
}

func closeTo(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(got[i] - want[i]); d > tol*(1+math.Abs(want[i])) || math.IsNaN(got[i]) {
			t.Fatalf("%s[%d] = %v, want %v (tol %g)", what, i, got[i], want[i], tol)
		}
	}
}

func f64(t *Tensor) []float64 { return ToSlice[float64](t) }

func TestVersionAndABI(t *testing.T) {
	if v := Version(); !strings.Contains(v, ".") {
		t.Fatalf("Version() = %q", v)
	}
	if ShimPath() == "" {
		t.Fatal("ShimPath empty after Load")
	}
	if ABIVersion < 1 {
		t.Fatal("ABIVersion")
	}
}

func TestDTypeRoundTrip(t *testing.T) {
	vals := []float64{0, 1, -2.5, 3.75, 100, -0.125}
	for _, dt := range []DType{Float32, Float64, BFloat16, Float16} {
		x := FromSlice(vals).To(dt, CPU)
		if x.DType() != dt {
			t.Fatalf("%v: dtype %v", dt, x.DType())
		}
		// These values are exact in every float format tested.
		closeTo(t, dt.String(), f64(x), vals, 0)
		if got := len(x.Bytes(dt)); got != len(vals)*dt.Size() {
			t.Fatalf("%v: %d bytes", dt, got)
		}
	}
	ints := []int64{0, -1, 7, 1 << 40}
	if got := FromSlice(ints).Int64s(); got[3] != 1<<40 || got[1] != -1 {
		t.Fatalf("i64 round trip %v", got)
	}
	if got := ToSlice[int32](FromSlice([]int32{5, -6})); got[0] != 5 || got[1] != -6 {
		t.Fatalf("i32 round trip %v", got)
	}
	b := ToSlice[bool](FromSlice([]bool{true, false, true}))
	if !b[0] || b[1] || !b[2] {
		t.Fatalf("bool round trip %v", b)
	}
	// The copy in two halves: the same values; a second Wait panics.
	c := StartToSlice[float64](FromSlice(vals).To(BFloat16, CPU))
	closeTo(t, "StartToSlice", c.Wait(), vals, 0)
	c.Free()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a second Wait did not panic")
			}
		}()
		c.Wait()
	}()
	// Raw bf16 bytes (as safetensors stores them): 1.0 = 0x3F80, -2 = 0xC000.
	x := FromBytes([]byte{0x80, 0x3f, 0x00, 0xc0}, BFloat16, []int64{2}, CPU)
	closeTo(t, "bf16 bytes", f64(x), []float64{1, -2}, 0)
}

func TestCreation(t *testing.T) {
	sh := []int64{2, 3}
	closeTo(t, "zeros", f64(Zeros(sh, Float32, CPU)), make([]float64, 6), 0)
	closeTo(t, "ones", f64(Ones(sh, Float32, CPU)), []float64{1, 1, 1, 1, 1, 1}, 0)
	closeTo(t, "full", f64(Full(sh, 2.5, Float32, CPU)), []float64{2.5, 2.5, 2.5, 2.5, 2.5, 2.5}, 0)
	closeTo(t, "arange", f64(Arange(2, 5, Int64, CPU)), []float64{2, 3, 4}, 0)
	if s := Empty(sh, BFloat16, CPU).Shape(); s[0] != 2 || s[1] != 3 {
		t.Fatalf("empty shape %v", s)
	}
	ManualSeed(1)
	a := f64(Randn([]int64{64}, Float32, CPU))
	ManualSeed(1)
	b := f64(Randn([]int64{64}, Float32, CPU))
	closeTo(t, "seeded randn", a, b, 0)
	u := f64(Rand([]int64{1000}, Float32, CPU))
	for _, v := range u {
		if v < 0 || v >= 1 {
			t.Fatalf("rand value %v outside [0,1)", v)
		}
	}
}

// A generator of its own draws what the default one draws after the same
// seed, and draws from the default one or another generator between its
// draws change nothing.
func TestGenerator(t *testing.T) {
	ManualSeed(7)
	want := f64(Rand([]int64{2, 50}, Float32, CPU))
	g, h := NewGenerator(7, CPU), NewGenerator(8, CPU)
	defer g.Free()
	defer h.Free()
	first := f64(g.Rand([]int64{2, 30}, Float32))
	ManualSeed(99)
	Rand([]int64{100}, Float32, CPU).Free()
	h.Rand([]int64{100}, Float32).Free()
	rest := f64(g.Rand([]int64{2, 20}, Float32))
	closeTo(t, "generator draws", append(first, rest...), want, 0)
	var nilGen *Generator
	nilGen.Free()
}

func TestElementwise(t *testing.T) {
	xs := []float64{0.5, 1.5, 2, 3.25}
	ys := []float64{2, -1, 0.5, 4}
	x, y := FromSlice(xs), FromSlice(ys)
	un := []struct {
		name string
		got  *Tensor
		f    func(float64) float64
	}{
		{"neg", x.Neg(), func(v float64) float64 { return -v }},
		{"exp", x.Exp(), math.Exp},
		{"log", x.Log(), math.Log},
		{"sqrt", x.Sqrt(), math.Sqrt},
		{"rsqrt", x.Rsqrt(), func(v float64) float64 { return 1 / math.Sqrt(v) }},
		{"silu", y.Silu(), func(v float64) float64 { return v / (1 + math.Exp(-v)) }},
		{"sigmoid", y.Sigmoid(), func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }},
		{"tanh", y.Tanh(), math.Tanh},
		{"abs", y.Abs(), math.Abs},
		{"cos", x.Cos(), math.Cos},
		{"sin", x.Sin(), math.Sin},
		{"relu", y.Relu(), func(v float64) float64 { return math.Max(v, 0) }},
	}
	for _, c := range un {
		src := xs
		if c.got == nil {
			t.Fatal(c.name)
		}
		switch c.name {
		case "silu", "sigmoid", "tanh", "abs", "relu":
			src = ys
		}
		want := make([]float64, len(src))
		for i, v := range src {
			want[i] = c.f(v)
		}
		closeTo(t, c.name, f64(c.got), want, 1e-12)
	}
	bin := []struct {
		name string
		got  *Tensor
		f    func(a, b float64) float64
	}{
		{"add", x.Add(y), func(a, b float64) float64 { return a + b }},
		{"sub", x.Sub(y), func(a, b float64) float64 { return a - b }},
		{"mul", x.Mul(y), func(a, b float64) float64 { return a * b }},
		{"div", x.Div(y), func(a, b float64) float64 { return a / b }},
		{"pow", x.Pow(y), math.Pow},
		{"maximum", x.Maximum(y), math.Max},
		{"minimum", x.Minimum(y), math.Min},
		{"addscalar", x.AddScalar(3), func(a, _ float64) float64 { return a + 3 }},
		{"mulscalar", x.MulScalar(-2), func(a, _ float64) float64 { return -2 * a }},
		{"divscalar", x.DivScalar(4), func(a, _ float64) float64 { return a / 4 }},
		{"powscalar", x.PowScalar(2), func(a, _ float64) float64 { return a * a }},
		{"clampmin", y.ClampMin(0.6), func(_, b float64) float64 { return math.Max(b, 0.6) }},
		{"clampmax", y.ClampMax(0.6), func(_, b float64) float64 { return math.Min(b, 0.6) }},
	}
	for _, c := range bin {
		want := make([]float64, len(xs))
		for i := range xs {
			want[i] = c.f(xs[i], ys[i])
		}
		closeTo(t, c.name, f64(c.got), want, 1e-12)
	}
	cmp := []struct {
		name string
		got  *Tensor
		want []bool
	}{
		{"eq", x.Eq(FromSlice([]float64{0.5, 0, 2, 0})), []bool{true, false, true, false}},
		{"ne", x.Ne(y), []bool{true, true, true, true}},
		{"lt", x.Lt(y), []bool{true, false, false, true}},
		{"le", x.Le(FromSlice([]float64{0.5, 1, 2, 3})), []bool{true, false, true, false}},
		{"gt", x.Gt(y), []bool{false, true, true, false}},
		{"ge", x.GeScalar(2), []bool{false, false, true, true}},
		{"ltscalar", x.LtScalar(2), []bool{true, true, false, false}},
		{"eqscalar", x.EqScalar(2), []bool{false, false, true, false}},
		{"and", x.Lt(y).And(x.GeScalar(1)), []bool{false, false, false, true}},
		{"or", x.Lt(y).Or(x.EqScalar(2)), []bool{true, false, true, true}},
		{"not", x.Lt(y).Not(), []bool{false, true, true, false}},
	}
	for _, c := range cmp {
		got := ToSlice[bool](c.got)
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("%s = %v, want %v", c.name, got, c.want)
			}
		}
	}
	// Broadcasting: (2, 1) + (3) = (2, 3).
	b := FromSlice([]float64{10, 20}, 2, 1).Add(FromSlice([]float64{1, 2, 3}))
	closeTo(t, "broadcast", f64(b), []float64{11, 12, 13, 21, 22, 23}, 0)
}

func TestReductions(t *testing.T) {
	x := FromSlice([]float64{1, 5, 3, -2, 0, 4}, 2, 3)
	closeTo(t, "sum", f64(x.Sum(1, false)), []float64{9, 2}, 0)
	closeTo(t, "mean", f64(x.Mean(0, false)), []float64{-0.5, 2.5, 3.5}, 0)
	closeTo(t, "max", f64(x.Max(-1, false)), []float64{5, 4}, 0)
	closeTo(t, "min", f64(x.Min(-1, true)), []float64{1, -2}, 0)
	closeTo(t, "argmax", f64(x.Argmax(1, false)), []float64{1, 2}, 0)
	closeTo(t, "argmin", f64(x.Argmin(1, false)), []float64{0, 0}, 0)
	lse := math.Log(math.Exp(1) + math.Exp(5) + math.Exp(3))
	closeTo(t, "logsumexp", f64(x.LogSumExp(1, false))[:1], []float64{lse}, 1e-12)
	if v := x.SumAll().Item(); v != 11 {
		t.Fatalf("sumall %v", v)
	}
	if v := x.MeanAll().Item(); math.Abs(v-11.0/6) > 1e-12 {
		t.Fatalf("meanall %v", v)
	}
	if s := x.Min(-1, true).Shape(); len(s) != 2 || s[1] != 1 {
		t.Fatalf("keepdim shape %v", s)
	}
}

// matmulRef is (M, K) x (K, N).
func matmulRef(a, b []float64, m, k, n int) []float64 {
	c := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += a[i*k+p] * b[p*n+j]
			}
			c[i*n+j] = s
		}
	}
	return c
}

func transposeRef(a []float64, r, c int) []float64 {
	out := make([]float64, len(a))
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			out[j*r+i] = a[i*c+j]
		}
	}
	return out
}

func TestMatmulLinearEmbedding(t *testing.T) {
	a, b := randSlice(1, 3*4), randSlice(2, 4*5)
	got := f64(FromSlice(a, 3, 4).Matmul(FromSlice(b, 4, 5)))
	closeTo(t, "matmul", got, matmulRef(a, b, 3, 4, 5), 1e-12)
	// float32 and bf16 agree with the float64 reference to their precision.
	got32 := f64(FromSlice(a, 3, 4).To(Float32, CPU).Matmul(FromSlice(b, 4, 5).To(Float32, CPU)))
	closeTo(t, "matmul f32", got32, matmulRef(a, b, 3, 4, 5), 1e-5)
	gotbf := f64(FromSlice(a, 3, 4).To(BFloat16, CPU).Matmul(FromSlice(b, 4, 5).To(BFloat16, CPU)))
	closeTo(t, "matmul bf16", gotbf, matmulRef(a, b, 3, 4, 5), 5e-2)

	w, bias := randSlice(3, 5*4), randSlice(4, 5)
	want := matmulRef(a, transposeRef(w, 5, 4), 3, 4, 5)
	for i := range want {
		want[i] += bias[i%5]
	}
	closeTo(t, "linear", f64(Linear(FromSlice(a, 3, 4), FromSlice(w, 5, 4), FromSlice(bias))), want, 1e-12)
	closeTo(t, "linear nobias", f64(Linear(FromSlice(a, 3, 4), FromSlice(w, 5, 4), nil)),
		matmulRef(a, transposeRef(w, 5, 4), 3, 4, 5), 1e-12)

	emb := randSlice(5, 6*3)
	got = f64(Embedding(FromSlice(emb, 6, 3), FromSlice([]int64{4, 0, 4})))
	closeTo(t, "embedding", got, append(append(append([]float64{}, emb[12:15]...), emb[0:3]...), emb[12:15]...), 0)
}

func softmaxRef(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	var s float64
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Exp(v - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

func TestSoftmaxRMSNormRope(t *testing.T) {
	x := randSlice(6, 2*5)
	want := append(softmaxRef(x[:5]), softmaxRef(x[5:])...)
	closeTo(t, "softmax", f64(FromSlice(x, 2, 5).Softmax(-1)), want, 1e-12)
	lw := make([]float64, len(want))
	for i := range want {
		lw[i] = math.Log(want[i])
	}
	closeTo(t, "log_softmax", f64(FromSlice(x, 2, 5).LogSoftmax(1)), lw, 1e-12)

	// RMSNorm: w * x / sqrt(mean(x^2) + eps), row-wise.
	w := randSlice(7, 5)
	var rn []float64
	for r := 0; r < 2; r++ {
		var ss float64
		for _, v := range x[r*5 : r*5+5] {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/5+1e-6)
		for i, v := range x[r*5 : r*5+5] {
			rn = append(rn, w[i]*v*inv)
		}
	}
	closeTo(t, "rms_norm", f64(RMSNorm(FromSlice(x, 2, 5), FromSlice(w), 1e-6)), rn, 1e-6)

	// RoPE for x (1, 1, T=3, D=4), HF rotate_half layout: pairs (i, i+D/2).
	inv := []float64{1, 0.01}
	pos := []int64{0, 1, 5}
	cos, sin := RopeTables(FromSlice(inv), FromSlice(pos), 1, Float64)
	xr := randSlice(8, 12)
	var rw []float64
	for ti, p := range pos {
		v := xr[ti*4 : ti*4+4]
		out := make([]float64, 4)
		for i := 0; i < 2; i++ {
			a := float64(p) * inv[i]
			c, s := math.Cos(a), math.Sin(a)
			out[i] = v[i]*c - v[i+2]*s
			out[i+2] = v[i+2]*c + v[i]*s
		}
		rw = append(rw, out...)
	}
	closeTo(t, "rope", f64(Rope(FromSlice(xr, 1, 1, 3, 4), cos, sin)), rw, 1e-6)
	// A scale multiplies both tables (yarn's attention factor).
	c2, _ := RopeTables(FromSlice(inv), FromSlice(pos), 2, Float64)
	closeTo(t, "rope scale", f64(c2), f64(cos.MulScalar(2)), 1e-12)
}

// attnRef is attention for one (batch, head): q (T, D), k/v (S, D), allowed(t, s).
func attnRef(q, k, v []float64, T, S, D int, allowed func(t, s int) bool) []float64 {
	out := make([]float64, T*D)
	for t := 0; t < T; t++ {
		sc := make([]float64, S)
		for s := 0; s < S; s++ {
			if !allowed(t, s) {
				sc[s] = math.Inf(-1)
				continue
			}
			for d := 0; d < D; d++ {
				sc[s] += q[t*D+d] * k[s*D+d]
			}
			sc[s] /= math.Sqrt(float64(D))
		}
		p := softmaxRef(sc)
		for s := 0; s < S; s++ {
			for d := 0; d < D; d++ {
				out[t*D+d] += p[s] * v[s*D+d]
			}
		}
	}
	return out
}

func TestSDPA(t *testing.T) {
	const B, H, Hkv, T, S, D = 2, 4, 2, 3, 5, 8
	q, k, v := randSlice(9, B*H*T*D), randSlice(10, B*Hkv*S*D), randSlice(11, B*Hkv*S*D)
	// An arbitrary mask (B, 1, T, S) with at least one allowed key per row.
	mask := make([]bool, B*T*S)
	r := rand.New(rand.NewPCG(3, 3))
	for i := range mask {
		mask[i] = r.IntN(3) > 0 || i%S == 0
	}
	ref := func(allowed func(b, t, s int) bool) []float64 {
		var out []float64
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				kh := h / (H / Hkv) // grouped-query: query head h reads kv head h/(H/Hkv)
				out = append(out, attnRef(q[(b*H+h)*T*D:(b*H+h+1)*T*D], k[(b*Hkv+kh)*S*D:(b*Hkv+kh+1)*S*D],
					v[(b*Hkv+kh)*S*D:(b*Hkv+kh+1)*S*D], T, S, D, func(t, s int) bool { return allowed(b, t, s) })...)
			}
		}
		return out
	}
	qt, kt, vt := FromSlice(q, B, H, T, D), FromSlice(k, B, Hkv, S, D), FromSlice(v, B, Hkv, S, D)
	mt := FromSlice(mask, B, 1, T, S)
	cases := []struct {
		name    string
		o       AttnOpts
		allowed func(b, t, s int) bool
	}{
		{"nomask", AttnOpts{}, func(b, t, s int) bool { return true }},
		{"causal", AttnOpts{Causal: true}, func(b, t, s int) bool { return s <= S-T+t }},
		{"mask", AttnOpts{Mask: mt}, func(b, t, s int) bool { return mask[(b*T+t)*S+s] }},
	}
	for _, c := range cases {
		want := ref(c.allowed)
		for _, impl := range []AttnImpl{AttnAuto, AttnMath} {
			c.o.Impl = impl
			closeTo(t, c.name, f64(SDPA(qt, kt, vt, c.o)), want, 1e-10)
			// float32 through the same path.
			got := f64(SDPA(qt.To(Float32, CPU), kt.To(Float32, CPU), vt.To(Float32, CPU), c.o))
			closeTo(t, c.name+" f32", got, want, 1e-5)
		}
	}
}

func TestCrossEntropy(t *testing.T) {
	logits := randSlice(12, 4*6)
	targets := []int64{2, -100, 5, 0}
	var sum float64
	var n int
	var per []float64
	for i, tg := range targets {
		if tg == -100 {
			per = append(per, 0)
			continue
		}
		p := softmaxRef(logits[i*6 : i*6+6])
		per = append(per, -math.Log(p[tg]))
		sum += -math.Log(p[tg])
		n++
	}
	lt, tt := FromSlice(logits, 4, 6), FromSlice(targets)
	closeTo(t, "ce mean", []float64{CrossEntropy(lt, tt, -100, ReduceMean).Item()}, []float64{sum / float64(n)}, 1e-12)
	closeTo(t, "ce sum", []float64{CrossEntropy(lt, tt, -100, ReduceSum).Item()}, []float64{sum}, 1e-12)
	closeTo(t, "ce none", f64(CrossEntropy(lt, tt, -100, ReduceNone)), per, 1e-12)
}

func TestTopKArgmaxMultinomial(t *testing.T) {
	x := FromSlice([]float64{0.1, 0.7, 0.05, 0.15, 0.3, 0.2, 0.4, 0.1}, 2, 4)
	v, i := x.TopK(2, -1)
	closeTo(t, "topk values", f64(v), []float64{0.7, 0.15, 0.4, 0.3}, 0)
	closeTo(t, "topk indices", f64(i), []float64{1, 3, 2, 0}, 0)
	// One-hot rows make sampling deterministic.
	oh := FromSlice([]float64{0, 0, 1, 0, 1, 0, 0, 0}, 2, 4)
	closeTo(t, "multinomial one-hot", f64(oh.Multinomial(1, false)), []float64{2, 0}, 0)
	// Frequencies follow the probabilities.
	ManualSeed(42)
	p := FromSlice([]float64{0.1, 0.6, 0.3})
	draws := p.Multinomial(20000, true).Int64s()
	counts := make([]float64, 3)
	for _, d := range draws {
		counts[d]++
	}
	for j, want := range []float64{0.1, 0.6, 0.3} {
		if math.Abs(counts[j]/20000-want) > 0.02 {
			t.Fatalf("multinomial frequency of %d: %v, want %v", j, counts[j]/20000, want)
		}
	}
}

func TestShapeAndIndexOps(t *testing.T) {
	x := FromSlice([]float64{0, 1, 2, 3, 4, 5}, 2, 3)
	closeTo(t, "reshape", f64(x.Reshape(3, -1)), []float64{0, 1, 2, 3, 4, 5}, 0)
	if s := x.Reshape(3, -1).Shape(); s[0] != 3 || s[1] != 2 {
		t.Fatalf("reshape shape %v", s)
	}
	closeTo(t, "transpose", f64(x.Transpose(0, 1)), []float64{0, 3, 1, 4, 2, 5}, 0)
	closeTo(t, "permute", f64(x.Permute(1, 0)), []float64{0, 3, 1, 4, 2, 5}, 0)
	closeTo(t, "narrow", f64(x.Narrow(1, 1, 2)), []float64{1, 2, 4, 5}, 0)
	closeTo(t, "cat0", f64(Cat(0, x, x.Narrow(0, 0, 1))), []float64{0, 1, 2, 3, 4, 5, 0, 1, 2}, 0)
	closeTo(t, "cat1", f64(Cat(1, x, x)), []float64{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}, 0)
	closeTo(t, "index_select", f64(x.IndexSelect(1, FromSlice([]int64{2, 0}))), []float64{2, 0, 5, 3}, 0)
	closeTo(t, "gather", f64(x.Gather(1, FromSlice([]int64{1, 1, 0, 2}, 2, 2))), []float64{1, 1, 3, 5}, 0)
	closeTo(t, "expand", f64(FromSlice([]float64{7, 8}, 2, 1).Expand(2, 3)), []float64{7, 7, 7, 8, 8, 8}, 0)
	mask := FromSlice([]bool{true, false, false, false, false, true}, 2, 3)
	closeTo(t, "masked_fill", f64(x.MaskedFill(mask, -1)), []float64{-1, 1, 2, 3, 4, -1}, 0)
	closeTo(t, "where", f64(Where(mask, x, x.Neg())), []float64{0, -1, -2, -3, -4, 5}, 0)
	y := x.Clone()
	y.IndexPut(FromSlice([]int64{1}), FromSlice([]float64{9, 9, 9}))
	closeTo(t, "index_put", f64(y), []float64{0, 1, 2, 9, 9, 9}, 0)
	closeTo(t, "clone untouched", f64(x), []float64{0, 1, 2, 3, 4, 5}, 0)
	z := Zeros([]int64{2, 3}, Float64, CPU)
	z.Narrow(1, 1, 1).CopyFrom(FromSlice([]float64{4, 5}, 2, 1))
	closeTo(t, "copy into view", f64(z), []float64{0, 4, 0, 0, 5, 0}, 0)
	z.Fill(3)
	closeTo(t, "fill", f64(z), []float64{3, 3, 3, 3, 3, 3}, 0)
	if x.Contiguous().Dim() != 2 || x.Numel() != 6 || x.Size(-1) != 3 {
		t.Fatal("dim/numel/size")
	}
	if !strings.Contains(x.String(), "[2 3]") {
		t.Fatalf("String() = %s", x)
	}
}

func TestErrorsAreGoErrors(t *testing.T) {
	err := Try(func() { FromSlice([]float64{1, 2, 3}, 3, 1).Matmul(FromSlice([]float64{1, 2}, 2, 1)) })
	if err == nil || !IsError(err) {
		t.Fatalf("shape mismatch gave %v", err)
	}
	if !strings.Contains(err.Error(), "matmul") || strings.Contains(err.Error(), "Exception raised from") {
		t.Fatalf("error should name the op and carry no C++ backtrace: %q", err)
	}
	err = Try(func() { FromBytes([]byte{1, 2, 3}, Float32, []int64{1}, CPU) })
	if err == nil || !strings.Contains(err.Error(), "needs 4") {
		t.Fatalf("short data gave %v", err)
	}
	var x *Tensor
	if err := Try(func() { x.Neg() }); err == nil {
		t.Fatal("nil tensor use should fail")
	}
	freed := FromSlice([]float64{1})
	freed.Free()
	freed.Free()
	if err := Try(func() { freed.Neg() }); err == nil || !strings.Contains(err.Error(), "freed") {
		t.Fatalf("freed tensor use gave %v", err)
	}
	if _, err := ParseDType("f8"); err == nil {
		t.Fatal("ParseDType(f8) should fail")
	}
	if _, err := ParseDevice("tpu"); err == nil {
		t.Fatal("ParseDevice(tpu) should fail")
	}
	if d, _ := ParseDevice("cuda:3"); d != CUDA(3) {
		t.Fatal("ParseDevice(cuda:3)")
	}
	// Recover leaves panics that are not libtorch's alone.
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v", r)
		}
	}()
	_ = Try(func() { panic("boom") })
}

func TestCUDAOnCPUBuild(t *testing.T) {
	if CUDAAvailable() {
		t.Skip("GPU present: covered by the GPU smoke (docs/gpu.md)")
	}
	if CUDADeviceCount() != 0 {
		t.Fatal("device count on a CPU build")
	}
	if _, err := CUDAMemStats(0); err == nil {
		t.Fatal("memory stats without CUDA should be an error")
	}
	if _, _, err := CUDAMemInfo(0); err == nil {
		t.Fatal("free memory without CUDA should be an error")
	}
	if err := Try(func() { Zeros([]int64{1}, Float32, CUDA(0)) }); err == nil {
		t.Fatal("allocating on a missing GPU should be an error")
	}
}

func rssKB(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	var size, res int64
	if _, err := fmt.Sscan(string(b), &size, &res); err != nil {
		t.Fatal(err)
	}
	return res * int64(os.Getpagesize()) / 1024
}

// settle runs the garbage collector until cleanups stop freeing tensors.
func settle() int64 {
	n := LiveTensors()
	for i := 0; i < 50; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		m := LiveTensors()
		if m == n && i > 2 {
			break
		}
		n = m
	}
	return n
}

func TestNoLeakOverManyCycles(t *testing.T) {
	cycle := func() {
		a := Ones([]int64{64}, Float32, CPU)
		m := a.MulScalar(2)
		b := m.Add(a)
		Free(a, m, b)
	}
	for i := 0; i < 2000; i++ { // warm the allocator
		cycle()
	}
	live0, rss0 := settle(), rssKB(t)
	for i := 0; i < 100000; i++ {
		cycle()
	}
	live1, rss1 := LiveTensors(), rssKB(t)
	if live1 != live0 {
		t.Fatalf("live tensors %d -> %d over 100k create/free cycles", live0, live1)
	}
	// 300k tensors of 256 bytes would be ~75 MB if they leaked.
	if rss1-rss0 > 8*1024 {
		t.Fatalf("RSS grew %d KB over 100k cycles", rss1-rss0)
	}
}

func TestCleanupSafetyNet(t *testing.T) {
	live0 := settle()
	for i := 0; i < 10000; i++ {
		Ones([]int64{16}, Float32, CPU).AddScalar(1) // never freed explicitly
	}
	if live := settle(); live > live0 {
		t.Fatalf("unreachable tensors not released: %d live, %d before", live, live0)
	}
}

func TestShimLoadFailures(t *testing.T) {
	// Each case runs this test binary again with DLLM_TORCH_LIB set: TestMain
	// reports Load's error and exits before any test runs.
	dir := t.TempDir()
	src := filepath.Join(dir, "fake.c")
	if err := os.WriteFile(src, []byte("int dt_abi_version(void) { return 999; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "libdllmtorch.so")
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-o", fake, src).CombinedOutput(); err != nil {
		t.Skipf("no C compiler for the fake shim: %v %s", err, out)
	}
	cases := []struct{ lib, want string }{
		{filepath.Join(dir, "missing.so"), "not found"},
		{fake, "ABI version 999"},
		{src, "cannot use"},
	}
	for _, c := range cases {
		cmd := exec.Command(os.Args[0], "-test.run=^TestShimLoadFailures$")
		cmd.Env = append(os.Environ(), "DLLM_TORCH_LIB="+c.lib)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "make shim") {
			t.Errorf("DLLM_TORCH_LIB=%s: want %q and a build hint, got:\n%s", c.lib, c.want, out)
		}
	}
}
