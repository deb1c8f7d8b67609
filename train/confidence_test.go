package train

import (
	"math"
	"testing"

	"dllm/torch"
)

// The confidence loss is scale times the summed entropy of the rows whose
// argmax is their target, computed here by hand from the same logits; its
// gradient reaches those rows only.
func TestConfidenceLoss(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Fatal(err)
	}
	logits := [][]float32{
		{2, 0.5, -1, 0},   // argmax 0
		{0.1, 0.2, 3, -2}, // argmax 2
		{1, 1.5, 0, 0.3},  // argmax 1
	}
	ids := []int64{0, 1, 1} // rows 0 and 2 right, row 1 wrong
	const scale = 0.25
	want := 0.0
	for i, row := range logits {
		best := 0
		for j := range row {
			if row[j] > row[best] {
				best = j
			}
		}
		if int64(best) != ids[i] {
			continue
		}
		z := 0.0
		for _, v := range row {
			z += math.Exp(float64(v))
		}
		for _, v := range row {
			p := math.Exp(float64(v)) / z
			want -= p * math.Log(p)
		}
	}
	want *= scale
	var flat []float32
	for _, row := range logits {
		flat = append(flat, row...)
	}
	x := torch.FromSlice(flat, 3, 4).SetRequiresGrad(true)
	id := torch.FromSlice(ids)
	defer torch.Free(x, id)
	l := confidenceLoss(x, id, scale)
	defer l.Free()
	if got := l.Item(); math.Abs(got-want) > 1e-5 {
		t.Fatalf("confidence loss %v, want %v", got, want)
	}
	l.Backward()
	g := x.Grad()
	defer g.Free()
	grad := g.Float32s()
	for i := range logits {
		nonzero := false
		for _, v := range grad[4*i : 4*i+4] {
			nonzero = nonzero || v != 0
		}
		if nonzero != (i != 1) {
			t.Errorf("row %d: gradient %v (want none on the wrong row only)", i, grad[4*i:4*i+4])
		}
	}
}
