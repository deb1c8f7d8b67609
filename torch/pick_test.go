package torch

import (
	"math"
	"math/rand/v2"
	"testing"
)

// pickRef is the greedy choice computed in float64 in Go: the first index
// of each row's largest value (mask left out) and 1 / sum exp(x - max).
func pickRef(data []float32, n, v int, mask int) (p []float64, ids []int64) {
	for r := range n {
		row := data[r*v : (r+1)*v]
		best, at := math.Inf(-1), -1
		for i, x := range row {
			if i != mask && float64(x) > best {
				best, at = float64(x), i
			}
		}
		sum := 0.0
		for i, x := range row {
			if i != mask {
				sum += math.Exp(float64(x) - best)
			}
		}
		p = append(p, 1/sum)
		ids = append(ids, int64(at))
	}
	return p, ids
}

// TestPickGreedy checks the greedy pick against float64 arithmetic in Go,
// with ties (the first index wins, as torch.argmax), a masked column that
// holds the largest value, -inf entries and, on a GPU, the kernel in bf16
// and float32 at a real vocabulary's size.
func TestPickGreedy(t *testing.T) {
	type tc struct {
		name    string
		n, v    int
		mask    int
		dtype   DType
		dev     Device
		fill    func(r *rand.Rand, i int) float32
		maxRelP float64
	}
	gauss := func(r *rand.Rand, i int) float32 { return float32(r.NormFloat64() * 3) }
	ties := func(r *rand.Rand, i int) float32 { return float32(r.IntN(3)) }
	cases := []tc{
		{"cpu gauss", 4, 37, -1, Float32, CPU, gauss, 1e-6},
		{"cpu ties and mask", 5, 16, 3, Float32, CPU, ties, 1e-6},
		{"cpu -inf", 2, 9, 0, Float32, CPU, func(r *rand.Rand, i int) float32 {
			if i%3 == 0 {
				return float32(math.Inf(-1))
			}
			return gauss(r, i)
		}, 1e-6},
	}
	if CUDAAvailable() {
		cases = append(cases,
			tc{"cuda f32 vocab", 32, 130560, 130559, Float32, CUDA(0), gauss, 1e-4},
			tc{"cuda bf16 vocab ties", 33, 130560, 7, BFloat16, CUDA(0), ties, 1e-4},
			tc{"cuda bf16 odd vocab", 3, 1001, -1, BFloat16, CUDA(0), gauss, 1e-4},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, uint64(c.v)))
			data := make([]float32, c.n*c.v)
			for i := range data {
				data[i] = c.fill(r, i)
			}
			if c.mask >= 0 {
				data[c.mask] = 100 // the mask column is never picked, even when largest
			}
			host := FromSlice(data, int64(c.n), int64(c.v))
			defer host.Free()
			l := host.To(c.dtype, c.dev)
			defer l.Free()
			// The reference sees the values the device holds (bf16-rounded).
			back := l.To(Float32, CPU)
			defer back.Free()
			p, ids := pickRef(ToSlice[float32](back), c.n, c.v, c.mask)
			out := PickGreedy(l, int64(c.mask))
			defer out.Free()
			check := func(what string, got []float64) {
				for i := range c.n {
					if int64(got[c.n+i]) != ids[i] {
						t.Errorf("%s row %d: id %v, want %d", what, i, got[c.n+i], ids[i])
					}
					if d := math.Abs(got[i]-p[i]) / p[i]; d > c.maxRelP {
						t.Errorf("%s row %d: p %.8g, want %.8g (rel %.1e)", what, i, got[i], p[i], d)
					}
				}
			}
			check("PickGreedy", ToSlice[float64](out))
			if c.n < 2 {
				return
			}
			// Row 0 from a tensor of its own (memory apart from the rest).
			first := host.Narrow(0, 0, 1).To(c.dtype, c.dev)
			rest := l.Narrow(0, 1, int64(c.n-1))
			defer Free(first, rest)
			after := PickGreedyAfter(first, rest, int64(c.mask))
			defer after.Free()
			check("PickGreedyAfter", ToSlice[float64](after))
		})
	}
	t.Run("errors", func(t *testing.T) {
		l := Zeros([]int64{2, 5}, Float32, CPU)
		defer l.Free()
		for _, mask := range []int64{5, 9} {
			if err := Try(func() { PickGreedy(l, mask).Free() }); err == nil {
				t.Errorf("mask %d of 5: no error", mask)
			}
		}
		v := Zeros([]int64{5}, Float32, CPU)
		defer v.Free()
		if err := Try(func() { PickGreedy(v, -1).Free() }); err == nil {
			t.Error("1-d logits: no error")
		}
		wide := Zeros([]int64{1, 6}, Float32, CPU)
		defer wide.Free()
		if err := Try(func() { PickGreedyAfter(wide, l, -1).Free() }); err == nil {
			t.Error("a first row of 6 before rows of 5: no error")
		}
	})
}
