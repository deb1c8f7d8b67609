package train

import (
	"math"
	"math/rand/v2"
)

// sequence is one packed training sequence as the loop uses it.
type sequence struct {
	tokens []int64 // (L)
	loss   []bool  // (L) token i is a training target
	starts []int   // sorted positions where documents start
}

// copyNoise is one noised copy of a sequence: which tokens are replaced by
// the mask token and, where they are, the weight of their loss.
type copyNoise struct {
	masked []bool
	weight []float32
}

// drawNoise masks a sequence span by span (spans of `span` tokens aligned
// at 0: the blocks, or the whole sequence for mdm). Only loss-on tokens may
// be masked (prompt tokens of chat data stay clean). Per span a level
// t ~ U(tmin, 1) is drawn and each maskable token is masked with
// probability t; a span left without any mask gets one at random, so every
// span trains something. The complement (when asked) masks exactly the
// maskable tokens the first copy left, at level 1-t.
//
// The loss weight is 1/max(p, tfloor) with p the actual probability that a
// token of the span is masked in that copy: p = t + (1-t)^n/n for the first
// copy (n maskable tokens; the second term is the forced mask), 1-p for the
// complement. For large spans p = t (the 1/t of masked diffusion); for a
// one-token block p = 1, so block size 1 is exactly the AR loss.
func drawNoise(rng *rand.Rand, loss []bool, span int, tmin, tfloor float64, complementary bool) (a, b copyNoise) {
	L := len(loss)
	a = copyNoise{masked: make([]bool, L), weight: make([]float32, L)}
	if complementary {
		b = copyNoise{masked: make([]bool, L), weight: make([]float32, L)}
	}
	var idx []int
	for s := 0; s < L; s += span {
		e := min(s+span, L)
		idx = idx[:0]
		for i := s; i < e; i++ {
			if loss[i] {
				idx = append(idx, i)
			}
		}
		n := len(idx)
		if n == 0 {
			continue
		}
		t := tmin + (1-tmin)*rng.Float64()
		hit := false
		for _, i := range idx {
			if rng.Float64() < t {
				a.masked[i], hit = true, true
			}
		}
		if !hit {
			a.masked[idx[rng.IntN(n)]] = true
		}
		p := t + math.Pow(1-t, float64(n))/float64(n)
		wa := float32(1 / max(p, tfloor))
		wb := float32(1 / max(1-p, tfloor))
		for _, i := range idx {
			a.weight[i] = wa
			if complementary {
				b.masked[i] = !a.masked[i]
				b.weight[i] = wb
			}
		}
	}
	return a, b
}

// targets are the positions of a batch that carry a loss: the row of the
// flattened (B*T) hidden states that predicts, the token it must predict
// and the weight of its cross-entropy.
type targets struct {
	rows, ids []int64
	weights   []float32
}

func (t *targets) add(row int, id int64, w float32) {
	t.rows = append(t.rows, int64(row))
	t.ids = append(t.ids, id)
	t.weights = append(t.weights, w)
}

// microBatch is one forward's worth of input, laid out for the model on
// the host.
type microBatch struct {
	B, T int // rows and layout length (2L for block, L otherwise)
	L    int // tokens per sequence
	// block is the block objective's block size (0 otherwise).
	block int
	ids   []int64 // (B, T) input ids
	docs  []int64 // (B, T) document index of each position
	pos   []int64 // (T) RoPE positions, shared by the rows
	// attn, when set, is this batch's structural (T, T) mask (mdm
	// annealing); otherwise the objective's cached one applies.
	attn []bool
	diff targets // diffusion (or, for ar, next-token) targets
	ar   targets // AR targets of the clean copy (ar_loss_weight)
	// eligible counts the loss-on tokens of every row that have a
	// predicting row: the loss is normalised by their sum over the step.
	eligible int
	seqs     int // distinct data sequences
	// clean (seqs, L) are the sequences as the data has them and cleanDocs
	// (seqs, L) their document indices: the distillation teacher's input.
	clean, cleanDocs []int64
	// teach holds, per diff target, the row of the teacher's causal
	// forward over clean (flattened, seqs*L) whose next-token distribution
	// predicts the same token: row i-1 of its sequence for token i, or -1
	// where no row may (the first token of a document, a target only
	// without the shift). distilled counts the rows that are not -1.
	teach     []int64
	distilled int
}

// batchSpec is what a micro-batch's layout depends on besides its data.
type batchSpec struct {
	objective     string
	blockSize     int // block objective
	shift         bool
	complementary bool
	tmin, tfloor  float64
	arWeight      float64
	annealP       float64 // mdm: < 1 draws an annealed mask
	maskID        int64
}

// buildBatch noises seqs (all of length L) and lays them out for spec's
// objective, drawing all randomness from rng.
func buildBatch(spec batchSpec, seqs []sequence, rng *rand.Rand) *microBatch {
	L := len(seqs[0].tokens)
	mb := &microBatch{L: L, T: L, seqs: len(seqs)}
	copies := 1
	if spec.objective != ObjectiveAR && spec.complementary {
		copies = 2
	}
	if spec.objective == ObjectiveBlock {
		mb.T, mb.block = 2*L, spec.blockSize
	}
	T := mb.T
	for i := 0; i < L; i++ {
		mb.pos = append(mb.pos, int64(i))
	}
	if spec.objective == ObjectiveBlock {
		mb.pos = append(mb.pos, mb.pos...)
	}
	span := L
	if spec.objective == ObjectiveBlock {
		span = spec.blockSize
	}
	for q, s := range seqs {
		docs := docIDs(L, s.starts)
		mb.clean = append(mb.clean, s.tokens...)
		mb.cleanDocs = append(mb.cleanDocs, docs...)
		var noise [2]copyNoise
		if spec.objective != ObjectiveAR {
			noise[0], noise[1] = drawNoise(rng, s.loss, span, spec.tmin, spec.tfloor, copies == 2)
		}
		for c := 0; c < copies; c++ {
			r := mb.B
			mb.B++
			base := r * T
			// 1. Input ids: the noisy copy, then (block) the clean one.
			for i, tok := range s.tokens {
				if spec.objective != ObjectiveAR && noise[c].masked[i] {
					tok = spec.maskID
				}
				mb.ids = append(mb.ids, tok)
			}
			mb.docs = append(mb.docs, docs...)
			if spec.objective == ObjectiveBlock {
				mb.ids = append(mb.ids, s.tokens...)
				mb.docs = append(mb.docs, docs...)
			}
			// 2. Targets: every loss-on token with a predicting row counts
			// in the normaliser; masked ones (all, for ar) carry a loss.
			for i := 0; i < L; i++ {
				row := predictingRow(spec.objective, spec.shift, spec.blockSize, i, docs)
				if !s.loss[i] || row < 0 {
					continue
				}
				mb.eligible++
				switch {
				case spec.objective == ObjectiveAR:
					mb.diff.add(base+row, s.tokens[i], 1)
					mb.addTeach(q, i, docs)
				case noise[c].masked[i]:
					mb.diff.add(base+row, s.tokens[i], noise[c].weight[i])
					mb.addTeach(q, i, docs)
				}
				// 3. The AR loss of the clean copy, once per sequence (its
				// weight covers the copies counted in the normaliser).
				if spec.arWeight > 0 && c == 0 && i > 0 && docs[i-1] == docs[i] {
					mb.ar.add(base+L+i-1, s.tokens[i], float32(spec.arWeight*float64(copies)))
				}
			}
		}
	}
	if spec.objective == ObjectiveMDM && spec.annealP < 1 {
		mb.attn = annealMask(rng, L, spec.annealP)
	}
	return mb
}

// addTeach records the teacher row for the diff target just added, token i
// of sequence q: whatever row of the student predicts it, the AR teacher
// reading the clean sequence causally predicts token i from row i-1, and
// never across a document start (its attention stops there, as the clean
// copy's does).
func (mb *microBatch) addTeach(q, i int, docs []int64) {
	if i == 0 || docs[i-1] != docs[i] {
		mb.teach = append(mb.teach, -1)
		return
	}
	mb.teach = append(mb.teach, int64(q*mb.L+i-1))
	mb.distilled++
}
