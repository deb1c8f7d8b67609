package diffusion

import (
	"slices"
	"testing"

	"dllm/torch"
)

// passes cuts each group into runs of whole requests within the rows of a
// pass, a request larger than a pass alone.
func TestPasses(t *testing.T) {
	rows := map[int]int{0: 2, 1: 3, 2: 1, 3: 5}
	groups := [][]int{{0, 1, 2}, {3}}
	for _, tc := range []struct {
		max  int
		want [][]int
	}{
		{100, [][]int{{0, 1, 2}, {3}}},
		{4, [][]int{{0}, {1, 2}, {3}}},
		{1, [][]int{{0}, {1}, {2}, {3}}},
	} {
		got := passes(groups, tc.max, func(i int) int { return rows[i] })
		if !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("at most %d rows: %v, want %v", tc.max, got, tc.want)
		}
	}
}

// A step's sampling draws are the same whether its requests are drawn in
// one pass or in passes of a row or two (pickAll's memory bound), the
// carry's row (pickSpec.first) included.
func TestPickAllPasses(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Fatal(err)
	}
	const V = 64
	logits := torch.Randn([]int64{9, V}, torch.Float32, torch.CPU)
	defer logits.Free()
	first := torch.Randn([]int64{1, V}, torch.Float32, torch.CPU)
	defer first.Free()
	draw := func(passBytes int64) (tok [][]int64) {
		// Four requests of 2, 3, 1 and 3 rows; the second draws after a carry.
		var reqs []*batchReq
		var offs []int64
		off := 0
		for i, n := range []int{2, 3, 1, 3} {
			pk := newPicker(plan{temperature: 0.8, topP: 0.9, seed: uint64(i + 1), mask: 5}, torch.CPU)
			defer pk.free()
			spec := &pickSpec{pick: pk, lo: 0, hi: n}
			if i == 1 {
				spec.first = first
			}
			reqs = append(reqs, &batchReq{seq: torch.BatchSeq{Rows: n}, mask: 5, spec: spec})
			offs = append(offs, int64(off))
			off += n
		}
		drawn := (&Batcher{}).pickAll(reqs, logits, offs, &logitRows{t: logits}, passBytes)
		for _, p := range drawn {
			tok = append(tok, p.tok)
		}
		return tok
	}
	one, several := draw(1<<30), draw(2*4*V)
	if !slices.EqualFunc(one, several, slices.Equal) {
		t.Errorf("one pass %v, passes of two rows %v", one, several)
	}
	if len(one) != 4 || len(one[1]) != 4 {
		t.Errorf("draws %v: want 4 requests, the second with its carry's row", one)
	}
}
