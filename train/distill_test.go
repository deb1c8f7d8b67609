package train

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dllm/model"
	"dllm/tokenizer"
	"dllm/torch"
)

// klHand is T^2 KL(softmax(zt/T) || softmax(zs/T)) in float64.
func klHand(zt, zs []float32, temp float64) float64 {
	logSoftmax := func(z []float32) []float64 {
		mx := math.Inf(-1)
		for _, v := range z {
			mx = max(mx, float64(v)/temp)
		}
		sum := 0.0
		for _, v := range z {
			sum += math.Exp(float64(v)/temp - mx)
		}
		out := make([]float64, len(z))
		for i, v := range z {
			out[i] = float64(v)/temp - mx - math.Log(sum)
		}
		return out
	}
	lp, lq := logSoftmax(zt), logSoftmax(zs)
	kl := 0.0
	for i := range lp {
		kl += math.Exp(lp[i]) * (lp[i] - lq[i])
	}
	return temp * temp * kl
}

// TestSoftTargetsKL: the per-row term equals T^2 KL(teacher || student)
// computed by hand, and its gradient in the student's logits is
// T (softmax(z_s/T) - softmax(z_t/T)).
func TestSoftTargetsKL(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Skip(err)
	}
	zt := []float32{2, -1, 0.5, 0, 3, 1, 1, -2} // (2, 4) teacher
	zs := []float32{0, 1, -0.5, 2, 3, 0, 1, -1} // (2, 4) student
	for _, temp := range []float64{1, 2, 0.5} {
		tt := torch.FromSlice(zt, 2, 4)
		st := newSoftTargets(tt, temp)
		z := torch.FromSlice(zs, 2, 4).SetRequiresGrad(true)
		kl := st.kl(z, temp)
		got := kl.Float32s()
		sum := kl.SumAll()
		sum.Backward()
		g := z.Grad().Float32s()
		for r := 0; r < 2; r++ {
			want := klHand(zt[4*r:4*r+4], zs[4*r:4*r+4], temp)
			if math.Abs(float64(got[r])-want) > 1e-5*max(1, want) {
				t.Errorf("T=%v row %d: KL %v, by hand %v", temp, r, got[r], want)
			}
			// d/dz_s T^2 KL = T (q - p).
			p, q := softmaxT(zt[4*r:4*r+4], temp), softmaxT(zs[4*r:4*r+4], temp)
			for v := 0; v < 4; v++ {
				if want := temp * (q[v] - p[v]); math.Abs(float64(g[4*r+v])-want) > 1e-5 {
					t.Errorf("T=%v row %d: gradient[%d] %v, want %v", temp, r, v, g[4*r+v], want)
				}
			}
		}
		torch.Free(tt, z, kl, sum)
		st.free()
	}
}

func softmaxT(z []float32, temp float64) []float64 {
	out := make([]float64, len(z))
	sum := 0.0
	for i, v := range z {
		out[i] = math.Exp(float64(v) / temp)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// TestDistillAlignment builds micro-batches of two sequences (the first
// with documents 0-6 and 7-11, the second without a document start) and
// checks the distillation term of trainMicro against one computed by hand
// from the two models' logits: the teacher reads each clean sequence
// causally within documents, and target token i of every noisy copy is
// compared with the teacher's row i-1, whichever student row predicts it
// (row i-1 of the noisy or, at a block start, the clean copy with the
// shift; row i without). With the teacher the student itself, the KL is 0
// exactly where the student's predicting row reads what the AR model
// reads: the clean-copy rows at block starts (so everywhere for blocks of
// 1), every row of the ar objective.
func TestDistillAlignment(t *testing.T) {
	dir := tinyModel(t)
	lo := model.LoadOptions{Device: torch.CPU, DType: torch.Float32}
	student, err := model.Load(dir, lo)
	if err != nil {
		t.Fatal(err)
	}
	defer student.Free()
	for _, p := range student.Params() {
		p.SetRequiresGrad(true) // trainMicro backpropagates
	}
	other, err := model.NewRandom(student.Config, lo, 7, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Free()
	const L = 12
	docs := [][]int64{{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, make([]int64, L)}
	var seqs []sequence
	for q, starts := range [][]int{{0, 7}, nil} {
		s := sequence{starts: starts}
		for i := 0; i < L; i++ {
			s.tokens = append(s.tokens, int64(20+(7*i+5*q)%60))
			s.loss = append(s.loss, true)
		}
		seqs = append(seqs, s)
	}
	for _, tc := range []struct {
		name      string
		objective string
		shift     bool
		bs        int
		temp      float64
		chunk     int
		self      bool // the teacher is the student
	}{
		{"block shift", ObjectiveBlock, true, 4, 1, 2048, false},
		{"block no shift T=2 chunks of 5", ObjectiveBlock, false, 4, 2, 5, false},
		{"mdm shift", ObjectiveMDM, true, 4, 1, 2048, false},
		{"ar", ObjectiveAR, true, 4, 0.5, 7, false},
		{"self block 4: 0 at block starts", ObjectiveBlock, true, 4, 1, 2048, true},
		{"self block 1: 0 everywhere", ObjectiveBlock, true, 1, 1, 2048, true},
		{"self ar: 0 everywhere", ObjectiveAR, true, 4, 1, 2048, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			teacher := other
			if tc.self {
				teacher = student
			}
			spec := batchSpec{objective: tc.objective, blockSize: tc.bs, shift: tc.shift, complementary: true, tfloor: 0.1, annealP: 1, maskID: tinyMaskID}
			mb := buildBatch(spec, seqs, rand.New(rand.NewPCG(3, 4)))
			// 1. Both models' logits, each on its own input.
			tl := forwardLogits(t, teacher, mb.clean, len(seqs), L, L, func(q int) []bool { return handMask(L, docs[q], func(i, j int) bool { return j <= i }) })
			var studentMask func(q int) []bool
			switch tc.objective {
			case ObjectiveBlock:
				studentMask = func(q int) []bool {
					return withDocs(blockLayoutMask(L, tc.bs), append(slices.Clone(docs[q]), docs[q]...))
				}
			case ObjectiveMDM:
				studentMask = func(q int) []bool { return handMask(L, docs[q], func(i, j int) bool { return true }) }
			case ObjectiveAR:
				studentMask = func(q int) []bool { return handMask(L, docs[q], func(i, j int) bool { return j <= i }) }
			}
			copies := mb.B / len(seqs)
			sl := forwardLogits(t, student, mb.ids, mb.B, mb.T, L, func(r int) []bool { return studentMask(r / copies) })
			V := int(student.Config.VocabSize)
			row := func(z []float32, r int) []float32 { return z[r*V : (r+1)*V] }
			// 2. The term by hand, target by target.
			var wantTeach []int64
			sum, n := 0.0, 0
			for r := 0; r < mb.B; r++ {
				q := r / copies
				for i := 0; i < L; i++ {
					first := i == 0 || docs[q][i-1] != docs[q][i] // of a document: no teacher row
					var srow int
					switch {
					case tc.objective == ObjectiveAR || (tc.shift && tc.objective == ObjectiveMDM):
						srow = i - 1
					case tc.shift && i%tc.bs == 0:
						srow = L + i - 1 // the clean copy
					case tc.shift:
						srow = i - 1
					default:
						srow = i
					}
					target := tc.objective == ObjectiveAR || mb.ids[r*mb.T+i] == tinyMaskID
					if !target || (first && tc.shift) {
						continue
					}
					if first {
						wantTeach = append(wantTeach, -1)
						continue
					}
					trow := q*L + i - 1
					wantTeach = append(wantTeach, int64(trow))
					kl := klHand(row(tl, trow), row(sl, r*mb.T+srow), tc.temp)
					sum += kl
					n++
					clean := srow >= L || tc.objective == ObjectiveAR
					if tc.self && clean && kl > 1e-9 {
						t.Errorf("teacher = student: KL %.3g at row %d token %d, predicted from a clean row", kl, r, i)
					}
				}
			}
			if !slices.Equal(mb.teach, wantTeach) || mb.distilled != n {
				t.Fatalf("teacher rows %v (%d), want %v (%d)", mb.teach, mb.distilled, wantTeach, n)
			}
			if !tc.shift && !slices.Contains(mb.teach, -1) {
				t.Fatal("without the shift the first tokens of documents are targets without a teacher row; none was drawn")
			}
			// 3. The term of trainMicro, weight 0.5.
			nt := newNet(student, torch.Float32, false, 0, tc.chunk)
			nt.distill = &distiller{m: teacher, weight: 0.5, temp: tc.temp}
			defer func() { nt.distill.causal.Free(); nt.invFreq.Free() }()
			base := baseFor(tc.objective, L, tc.bs)
			defer base.Free()
			lp, err := nt.trainMicro(mb, base, float64(mb.eligible), float64(mb.distilled))
			if err != nil {
				t.Fatal(err)
			}
			want := 0.5 * sum / float64(n)
			t.Logf("%d targets with a teacher row: term %.6g, by hand %.6g", n, lp.distill, want)
			// float32: sum p log p - sum p log q leaves ~1e-7 of rounding.
			if math.Abs(lp.distill-want) > 1e-6+1e-5*want {
				t.Fatalf("distillation term %.7g, by hand %.7g", lp.distill, want)
			}
			switch {
			case tc.self && (tc.bs == 1 || tc.objective == ObjectiveAR) && lp.distill > 1e-6:
				t.Fatalf("teacher = student, every target predicted from a clean row: term %.3g, want 0", lp.distill)
			case !(tc.self && (tc.bs == 1 || tc.objective == ObjectiveAR)) && !(lp.distill > 1e-4):
				t.Fatalf("term %.3g: want clearly above 0", lp.distill)
			}
			for _, p := range student.Params() {
				p.ZeroGrad()
			}
		})
	}
}

// handMask is the (L, L) mask allow(i, j) AND same document.
func handMask(L int, docs []int64, allow func(i, j int) bool) []bool {
	m := make([]bool, L*L)
	for i := 0; i < L; i++ {
		for j := 0; j < L; j++ {
			m[i*L+j] = allow(i, j) && docs[i] == docs[j]
		}
	}
	return m
}

// forwardLogits runs m on ids (B, T) with row r's (T, T) mask from maskOf
// and RoPE positions 0..L-1 (repeated for the 2L layout), returning the
// logits (B*T, V) flattened.
func forwardLogits(t *testing.T, m *model.Model, ids []int64, B, T, L int, maskOf func(r int) []bool) []float32 {
	t.Helper()
	var mask []bool
	for r := 0; r < B; r++ {
		mask = append(mask, maskOf(r)...)
	}
	var pos []int64
	for i := 0; i < T; i++ {
		pos = append(pos, int64(i%L))
	}
	it, mt, pt := torch.FromSlice(ids, int64(B), int64(T)), torch.FromSlice(mask, int64(B), 1, int64(T), int64(T)), torch.FromSlice(pos)
	defer torch.Free(it, mt, pt)
	var out []float32
	torch.NoGrad(func() {
		lg, err := m.Forward(it, model.ForwardOpts{Mask: mt, Positions: pt})
		if err != nil {
			t.Fatal(err)
		}
		out = lg.Float32s()
		lg.Free()
	})
	return out
}

// baseFor is the objective's structural mask as the trainer builds it.
func baseFor(objective string, L, bs int) *torch.Tensor {
	switch objective {
	case ObjectiveBlock:
		return tensorMask(blockLayoutMask(L, bs), 2*L, torch.CPU)
	case ObjectiveAR:
		return tensorMask(causalMask(L), L, torch.CPU)
	}
	return nil
}

// TestDistillWeightZero: weight 0 is the run without the key, bit for bit,
// whatever the other distill keys say (no teacher is even loaded); a
// positive weight changes the run and logs its term.
func TestDistillWeightZero(t *testing.T) {
	dir := tinyModel(t)
	src := toySource(t, 4, 16)
	var runs []*Result
	var outs []string
	for _, d := range []DistillConfig{{Temperature: 1}, {Teacher: "no/such/model", Weight: 0, Temperature: 3}, {Weight: 0.3, Temperature: 1}} {
		out := t.TempDir()
		c := tinyConfig(dir, out)
		c.Steps, c.Distill = 3, d
		res, err := Run(context.Background(), c, Options{Train: src})
		if err != nil {
			t.Fatal(err)
		}
		runs, outs = append(runs, res), append(outs, out)
	}
	if !slices.Equal(runs[0].Losses, runs[1].Losses) {
		t.Errorf("losses with weight 0 %v, without distill %v", runs[1].Losses, runs[0].Losses)
	}
	for _, f := range []string{modelWeights, optimizerName} {
		if !bytes.Equal(readCheckpointFile(t, outs[0], 3, f), readCheckpointFile(t, outs[1], 3, f)) {
			t.Errorf("%s differs between weight 0 and no distill", f)
		}
	}
	if runs[2].Losses[0] == runs[0].Losses[0] {
		t.Errorf("weight 0.3 left the first loss unchanged: %v", runs[2].Losses)
	}
	recs := mustMetrics(t, outs[2])
	if len(recs) != 3 || !(recs[0].DistillLoss > 0) || !(recs[0].Loss > recs[0].DistillLoss) {
		t.Errorf("metrics with distillation: %+v", recs)
	}
	if r := mustMetrics(t, outs[0]); r[0].DistillLoss != 0 {
		t.Errorf("metrics without distillation log a term: %+v", r[0])
	}
}

// mustMetrics reads out/metrics.jsonl.
func mustMetrics(t *testing.T, out string) []Record {
	t.Helper()
	recs, err := readMetrics(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestDistillLossFalls: distilling from a teacher that knows the data (an
// AR model trained on it first) brings the student's KL to it down, and
// the total loss with it.
func TestDistillLossFalls(t *testing.T) {
	dir := tinyModel(t)
	src := toySource(t, 16, 32)
	tc := tinyConfig(dir, t.TempDir())
	tc.Objective, tc.Export, tc.Steps = ObjectiveAR, true, 20
	teacher, err := Run(context.Background(), tc, Options{Train: src})
	if err != nil {
		t.Fatal(err)
	}
	c := tinyConfig(dir, t.TempDir())
	c.Steps, c.Distill = 20, DistillConfig{Teacher: teacher.Export, Weight: 1, Temperature: 1}
	res, err := Run(context.Background(), c, Options{Train: src})
	if err != nil {
		t.Fatal(err)
	}
	var kl []float64
	for _, r := range mustMetrics(t, c.Out) {
		kl = append(kl, r.DistillLoss)
	}
	first, last := mean(res.Losses[:5]), mean(res.Losses[len(res.Losses)-5:])
	kf, kla := mean(kl[:5]), mean(kl[len(kl)-5:])
	t.Logf("loss %.3f -> %.3f, distillation term %.3f -> %.3f", first, last, kf, kla)
	if !(last < 0.5*first) || !(kla < 0.5*kf) {
		t.Fatalf("loss %.3f -> %.3f, distillation term %.3f -> %.3f: want both halved", first, last, kf, kla)
	}
}

// TestDistillTeacherChecks: a teacher that cannot serve is refused before
// training, saying why.
func TestDistillTeacherChecks(t *testing.T) {
	dir := tinyModel(t)
	// A teacher whose vocabulary is the student's size but another
	// tokenizer: two ids of the probe's first tokens swapped.
	swapped := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		if err := os.Symlink(filepath.Join(dir, f), filepath.Join(swapped, f)); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(tokenizerProbe)
	a, _ := tok.Token(ids[0])
	b, _ := tok.Token(ids[1])
	raw, _ := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	var tj map[string]any
	if err := json.Unmarshal(raw, &tj); err != nil {
		t.Fatal(err)
	}
	vocab := tj["model"].(map[string]any)["vocab"].(map[string]any)
	vocab[a], vocab[b] = vocab[b], vocab[a]
	raw, _ = json.Marshal(tj)
	if err := os.WriteFile(filepath.Join(swapped, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	// A teacher of another vocabulary size (only its config.json is read).
	small := t.TempDir()
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	cfg = []byte(strings.Replace(string(cfg), `"vocab_size": 512`, `"vocab_size": 256`, 1))
	if err := os.WriteFile(filepath.Join(small, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, teacher, err string }{
		{"missing", filepath.Join(dir, "nothing"), "distill.teacher"},
		{"other vocab size", small, "vocab_size 256, the student's is 512"},
		{"other tokenizer", swapped, "splits text differently"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig(dir, t.TempDir())
			c.Distill.Teacher, c.Distill.Weight = tc.teacher, 1
			_, err := Run(context.Background(), c, Options{Train: toySource(t, 4, 16)})
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}
