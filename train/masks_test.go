package train

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"dllm/model"
	"dllm/torch"
)

// parseMask reads rows of '1'/'0' (spaces and '|' ignored).
func parseMask(rows []string) []bool {
	var m []bool
	for _, r := range rows {
		for _, ch := range r {
			switch ch {
			case '1':
				m = append(m, true)
			case '0':
				m = append(m, false)
			}
		}
	}
	return m
}

func showMask(m []bool, T int) string {
	var b strings.Builder
	for i := 0; i < T; i++ {
		for j := 0; j < T; j++ {
			if m[i*T+j] {
				b.WriteByte('1')
			} else {
				b.WriteByte('0')
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Two documents in a sequence of 8: positions 0-4 and 5-7.
var twoDocs = docIDs(8, []int{0, 5})

func TestDocIDs(t *testing.T) {
	for _, tc := range []struct {
		starts []int
		want   []int64
	}{
		{[]int{0, 5}, []int64{0, 0, 0, 0, 0, 1, 1, 1}},
		{[]int{3}, []int64{0, 0, 0, 1, 1, 1, 1, 1}}, // continuation, then a new document
		{nil, []int64{0, 0, 0, 0, 0, 0, 0, 0}},
		{[]int{0, 1, 7}, []int64{0, 1, 1, 1, 1, 1, 1, 2}},
	} {
		if got := docIDs(8, tc.starts); !slices.Equal(got, tc.want) {
			t.Errorf("docIDs(8, %v) = %v, want %v", tc.starts, got, tc.want)
		}
	}
}

func TestMasksMatchHandBuilt(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []bool
		T    int
		want []string
	}{
		{"block layout L=8 bs=4, documents 0-4 and 5-7", withDocs(blockLayoutMask(8, 4), append(slices.Clone(twoDocs), twoDocs...)), 16, []string{
			//  noisy 0-7  | clean 0-7
			"1111 0000 | 0000 0000", // n0: its block
			"1111 0000 | 0000 0000",
			"1111 0000 | 0000 0000",
			"1111 0000 | 0000 0000",
			"0000 1000 | 1111 0000", // n4: its block within doc 0, clean block 0
			"0000 0111 | 0000 0000", // n5: doc 1 starts inside block 1, nothing clean before it
			"0000 0111 | 0000 0000",
			"0000 0111 | 0000 0000",
			"0000 0000 | 1000 0000", // c0: causal, clean only
			"0000 0000 | 1100 0000",
			"0000 0000 | 1110 0000",
			"0000 0000 | 1111 0000",
			"0000 0000 | 1111 1000",
			"0000 0000 | 0000 0100", // c5: a new document
			"0000 0000 | 0000 0110",
			"0000 0000 | 0000 0111",
		}},
		{"block layout L=4 bs=1 (AR warm-up)", blockLayoutMask(4, 1), 8, []string{
			"1000 0000", "0100 1000", "0010 1100", "0001 1110",
			"0000 1000", "0000 1100", "0000 1110", "0000 1111",
		}},
		{"ar, two documents", withDocs(causalMask(8), twoDocs), 8, []string{
			"10000000", "11000000", "11100000", "11110000", "11111000", "00000100", "00000110", "00000111",
		}},
		{"mdm, two documents", withDocs(nil, twoDocs), 8, []string{
			"11111000", "11111000", "11111000", "11111000", "11111000", "00000111", "00000111", "00000111",
		}},
	} {
		if want := parseMask(tc.want); !slices.Equal(tc.got, want) {
			t.Errorf("%s:\ngot\n%swant\n%s", tc.name, showMask(tc.got, tc.T), showMask(want, tc.T))
		}
	}
}

func TestDeviceMaskMatchesHost(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Skip(err)
	}
	L, bs := 8, 4
	d2 := docIDs(L, []int{2, 3})
	rows := [][]int64{append(slices.Clone(twoDocs), twoDocs...), append(slices.Clone(d2), d2...)}
	base := tensorMask(blockLayoutMask(L, bs), 2*L, torch.CPU)
	docs := torch.FromSlice(append(slices.Clone(rows[0]), rows[1]...), 2, int64(2*L))
	got := torch.ToSlice[bool](deviceMask(base, docs)) // (2, 1, 2L, 2L)
	for r := range rows {
		want := withDocs(blockLayoutMask(L, bs), rows[r])
		if part := got[r*4*L*L : (r+1)*4*L*L]; !slices.Equal(part, want) {
			t.Errorf("row %d:\ngot\n%swant\n%s", r, showMask(part, 2*L), showMask(want, 2*L))
		}
	}
}

func TestPredictingRows(t *testing.T) {
	// L=8, blocks of 4, documents 0-4 and 5-7; -1: no prediction. Rows of
	// the block layout count the noisy copy 0-7, the clean copy 8-15.
	for _, tc := range []struct {
		objective string
		shift     bool
		want      []int
	}{
		{ObjectiveBlock, true, []int{-1, 0, 1, 2, 11, -1, 5, 6}}, // 4 starts a block: clean row 3
		{ObjectiveBlock, false, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{ObjectiveMDM, true, []int{-1, 0, 1, 2, 3, -1, 5, 6}},
		{ObjectiveMDM, false, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{ObjectiveAR, false, []int{-1, 0, 1, 2, 3, -1, 5, 6}}, // ar always predicts the next token
	} {
		var got []int
		for i := 0; i < 8; i++ {
			got = append(got, predictingRow(tc.objective, tc.shift, 4, i, twoDocs))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s shift=%v: rows %v, want %v", tc.objective, tc.shift, got, tc.want)
		}
	}
}

func TestAnnealMask(t *testing.T) {
	L := 64
	causal := causalMask(L)
	for _, tc := range []struct {
		p        float64
		min, max float64 // share of the non-causal pairs allowed
	}{{0, 0, 0}, {0.25, 0.18, 0.32}, {0.5, 0.42, 0.58}, {1, 1, 1}} {
		m := annealMask(rand.New(rand.NewPCG(1, 2)), L, tc.p)
		extra, upper := 0, 0
		for i := range m {
			if causal[i] && !m[i] {
				t.Fatalf("p=%v: a causal pair is masked out", tc.p)
			}
			if !causal[i] {
				upper++
				if m[i] {
					extra++
				}
			}
		}
		if share := float64(extra) / float64(upper); share < tc.min || share > tc.max {
			t.Errorf("p=%v: %.3f of the non-causal pairs allowed, want %v..%v", tc.p, share, tc.min, tc.max)
		}
	}
	// The annealing density by step.
	c := DefaultConfig()
	c.AnnealSteps = 100
	for s, want := range map[int]float64{0: 0, 50: 0.5, 100: 1, 500: 1} {
		if got := c.annealP(s); got != want {
			t.Errorf("annealP(%d) = %v, want %v", s, got, want)
		}
	}
}

func TestBuildBatchBlock(t *testing.T) {
	L, bs := 16, 4
	tokens := make([]int64, L)
	loss := make([]bool, L)
	for i := range tokens {
		tokens[i] = int64(100 + i)
		loss[i] = i != 2 && i != 3 // a "prompt" of two tokens stays clean
	}
	seq := sequence{tokens: tokens, loss: loss, starts: []int{0, 9}}
	spec := batchSpec{objective: ObjectiveBlock, blockSize: bs, shift: true, complementary: true, tfloor: 0.1, maskID: 7}
	mb := buildBatch(spec, []sequence{seq}, rand.New(rand.NewPCG(3, 4)))
	if mb.B != 2 || mb.T != 2*L {
		t.Fatalf("layout %dx%d, want 2x%d", mb.B, mb.T, 2*L)
	}
	docs := docIDs(L, seq.starts)
	masked := [2][]bool{}
	for r := 0; r < 2; r++ {
		row := mb.ids[r*2*L : (r+1)*2*L]
		if !slices.Equal(row[L:], tokens) {
			t.Fatalf("row %d: clean copy %v, want %v", r, row[L:], tokens)
		}
		masked[r] = make([]bool, L)
		for i := 0; i < L; i++ {
			switch {
			case row[i] == 7:
				masked[r][i] = true
				if !loss[i] {
					t.Errorf("row %d: loss-off token %d masked", r, i)
				}
			case row[i] != tokens[i]:
				t.Errorf("row %d: noisy token %d is %d", r, i, row[i])
			}
		}
	}
	for i := 0; i < L; i++ {
		if loss[i] && masked[0][i] == masked[1][i] {
			t.Errorf("token %d: masked %v in both copies; the copies must be complementary", i, masked[0][i])
		}
	}
	for b := 0; b < L; b += bs {
		if !slices.Contains(masked[0][b:b+bs], true) {
			t.Errorf("block %d of the first copy has no mask", b/bs)
		}
	}
	// Every masked, loss-on token with a predicting row is a target, read
	// from the row predictingRow names; the normaliser counts both copies.
	want := 0
	for r := 0; r < 2; r++ {
		for i := 0; i < L; i++ {
			p := predictingRow(ObjectiveBlock, true, bs, i, docs)
			if !masked[r][i] || p < 0 {
				continue
			}
			k := slices.Index(mb.diff.rows, int64(r*2*L+p))
			if k < 0 || mb.diff.ids[k] != tokens[i] {
				t.Errorf("row %d: token %d (predicted from layout row %d) is not a target", r, i, p)
			}
			want++
		}
	}
	if len(mb.diff.rows) != want {
		t.Errorf("%d targets, want %d", len(mb.diff.rows), want)
	}
	eligible := 0
	for i := 0; i < L; i++ {
		if loss[i] && predictingRow(ObjectiveBlock, true, bs, i, docs) >= 0 {
			eligible++
		}
	}
	if mb.eligible != 2*eligible {
		t.Errorf("eligible %d, want %d", mb.eligible, 2*eligible)
	}
}

func TestNoiseWeights(t *testing.T) {
	loss := []bool{true, true, true, true}
	rng := rand.New(rand.NewPCG(5, 6))
	// Block size 1: always masked, weight 1 (the AR loss); the complement
	// masks nothing.
	a, b := drawNoise(rng, loss, 1, 0, 0.1, true)
	for i := range loss {
		if !a.masked[i] || a.weight[i] != 1 || b.masked[i] {
			t.Fatalf("block size 1, token %d: masked %v weight %v, complement masked %v", i, a.masked[i], a.weight[i], b.masked[i])
		}
	}
	// Large spans: the weight is 1/max(t, floor) with t the masked share
	// (about); the mean over many draws of (masked share x weight) is 1.
	loss = make([]bool, 4096)
	for i := range loss {
		loss[i] = true
	}
	sum := 0.0
	const draws = 200
	for k := 0; k < draws; k++ {
		a, _ := drawNoise(rng, loss, 4096, 0.2, 0.01, false)
		n := 0
		for _, m := range a.masked {
			if m {
				n++
			}
		}
		sum += float64(n) / 4096 * float64(a.weight[0])
	}
	if m := sum / draws; m < 0.97 || m > 1.03 {
		t.Errorf("mean masked share x weight %.3f, want 1", m)
	}
}

// TestLayoutMatchesMask: the block objective through torch.Layout (the
// FlashAttention decomposition; on the CPU its reference maths) gives the
// masked path's losses and gradients, with and without layer
// checkpointing, for documents that start inside blocks.
func TestLayoutMatchesMask(t *testing.T) {
	dir := tinyModel(t)
	m, err := model.Load(dir, model.LoadOptions{Device: torch.CPU, DType: torch.Float32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	for _, p := range m.Params() {
		p.SetRequiresGrad(true)
	}
	const L, bs = 14, 4
	var seqs []sequence
	for q, starts := range [][]int{{0, 6, 9}, nil} {
		s := sequence{starts: starts}
		for i := 0; i < L; i++ {
			s.tokens = append(s.tokens, int64(20+(7*i+5*q)%60))
			s.loss = append(s.loss, true)
		}
		seqs = append(seqs, s)
	}
	spec := batchSpec{objective: ObjectiveBlock, blockSize: bs, shift: true, complementary: true, tfloor: 0.1, arWeight: 1, maskID: tinyMaskID}
	mb := buildBatch(spec, seqs, rand.New(rand.NewPCG(5, 6)))
	base := baseFor(ObjectiveBlock, L, bs)
	defer base.Free()
	run := func(flash, ckpt bool) (lossParts, [][]float32) {
		n := newNet(m, torch.Float32, ckpt, 1, 2048)
		defer n.invFreq.Free()
		n.flash = flash
		for _, p := range m.Params() {
			p.ZeroGrad()
		}
		lp, err := n.trainMicro(mb, base, float64(mb.eligible), 1)
		if err != nil {
			t.Fatal(err)
		}
		var gs [][]float32
		for _, p := range m.Params() {
			g := p.Grad()
			gs = append(gs, g.Float32s())
			g.Free()
		}
		return lp, gs
	}
	want, wg := run(false, false)
	for _, ckpt := range []bool{false, true} {
		got, gg := run(true, ckpt)
		if math.Abs(got.diff-want.diff) > 1e-5*want.diff || math.Abs(got.ar-want.ar) > 1e-5*want.ar {
			t.Fatalf("checkpointing %v: losses %+v, masked path %+v", ckpt, got, want)
		}
		for i := range wg {
			for j := range wg[i] {
				if d := math.Abs(float64(gg[i][j] - wg[i][j])); d > 1e-5+1e-3*math.Abs(float64(wg[i][j])) {
					t.Fatalf("checkpointing %v: param %d grad[%d] = %g, masked path %g", ckpt, i, j, gg[i][j], wg[i][j])
				}
			}
		}
	}
}
