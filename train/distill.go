package train

import (
	"fmt"
	"path/filepath"
	"slices"

	"dllm/model"
	"dllm/tokenizer"
	"dllm/torch"
)

// The distillation term (docs/training.md, "Distillation"). A frozen
// teacher, by default the run's starting model (the AR original's weights
// for a run on `dllm convert`'s output), reads each clean sequence
// causally, exactly as an AR model reads text. Every diffusion target,
// token i of a sequence, gets as soft target the teacher's next-token
// distribution from its row i-1: the one that predicts the same token,
// whichever student row predicts it (the shift moves the student's row,
// not the teacher's). The term is
//
//	weight * T^2 * mean over the targets of KL(softmax(z_teacher/T) || softmax(z_student/T))
//
// the mean over the targets of the whole step that have a teacher row,
// each once (not weighted by 1/t: the soft target does not depend on the
// noise level, and with complementary masks every token is a target in
// exactly one copy, so the mean is the per-token mean of the sequence).

// distiller is the frozen teacher: its weights are no autograd leaves, are
// in no optimizer and in no checkpoint, and it only runs under NoGrad.
type distiller struct {
	m      *model.Model // compute dtype, on the student's device
	dir    string
	weight float64
	temp   float64
	flops  flopsModel
	// causal is the (1, 1, L, L) structural mask of the teacher's forward,
	// built for the first sequence length it meets.
	causal  *torch.Tensor
	causalL int
}

// teacherDir is the distillation teacher's model directory: distill.teacher,
// or the run's starting model.
func (c *Config) teacherDir() string {
	if c.Distill.Teacher != "" {
		return c.Distill.Teacher
	}
	return c.Model
}

// newDistiller loads the teacher of cfg on dev in the compute dtype, after
// checking that it predicts over the student's vocabulary; nil when
// distillation is off.
func newDistiller(cfg *Config, student *model.Config, dev torch.Device, dtype torch.DType) (*distiller, error) {
	if cfg.Distill.Weight == 0 {
		return nil, nil
	}
	dir := cfg.teacherDir()
	tc, err := model.LoadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("train: distill.teacher %s: %w", dir, err)
	}
	if tc.VocabSize != student.VocabSize {
		return nil, fmt.Errorf("train: distill.teacher %s: vocab_size %d, the student's is %d: the teacher must predict over the student's tokens", dir, tc.VocabSize, student.VocabSize)
	}
	if err := sameTokenizer(dir, cfg.Model); err != nil {
		return nil, err
	}
	m, err := model.Load(dir, model.LoadOptions{Device: dev, DType: dtype})
	if err != nil {
		return nil, fmt.Errorf("train: distill.teacher %s: %w", dir, err)
	}
	return &distiller{m: m, dir: dir, weight: cfg.Distill.Weight, temp: cfg.Distill.Temperature, flops: newFlopsModel(tc)}, nil
}

// tokenizerProbe mixes words, digits, code, punctuation and non-Latin
// scripts: two tokenizers that split it alike share the vocabulary.
const tokenizerProbe = "The quick brown fox jumps over 13 lazy dogs.\n  x = a*b + 4096; // ok?\nÀ bientôt ! 你好，世界。 Привет"

// sameTokenizer checks, when both directories have a tokenizer, that they
// encode a probe text to the same ids: equal vocab sizes do not make equal
// vocabularies. The mask token `dllm convert` may add to the student's is
// an added token the probe does not contain, so it does not count.
func sameTokenizer(teacher, student string) error {
	if teacher == student || !fileExists(filepath.Join(teacher, tokenizer.TokenizerFile)) || !fileExists(filepath.Join(student, tokenizer.TokenizerFile)) {
		return nil
	}
	var ids [2][]int
	for k, dir := range []string{teacher, student} {
		tok, err := tokenizer.Load(dir)
		if err != nil {
			return fmt.Errorf("train: distill: %w", err)
		}
		ids[k] = tok.Encode(tokenizerProbe)
	}
	if !slices.Equal(ids[0], ids[1]) {
		return fmt.Errorf("train: distill.teacher %s: its tokenizer splits text differently from the student's (%s): the teacher must predict over the student's tokens", teacher, student)
	}
	return nil
}

func (d *distiller) free() {
	if d != nil {
		d.m.Free()
		d.causal.Free()
	}
}

// flopsOf is the teacher's forward over mb (no backward): the layers on
// seqs x L rows, dense causal attention (an explicit mask), the head on one
// row per diffusion target. 0 without distillation.
func (d *distiller) flopsOf(mb *microBatch) float64 {
	if d == nil {
		return 0
	}
	rows, L := float64(mb.seqs)*float64(mb.L), float64(mb.L)
	return 2*d.flops.layerParams*rows + 2*d.flops.headParams*float64(len(mb.teach)) + 4*d.flops.attnPerRow*rows*L
}

// distillTargets are a micro-batch's distillation inputs on the device.
type distillTargets struct {
	d  *distiller
	h  *torch.Tensor // (N, C) the teacher's final hidden states, row k for diff target k
	on *torch.Tensor // (N) float32: 1 where diff target k has a teacher row, 0 where not
	// scale is weight / (the step's targets with a teacher row).
	scale float64
}

// targets runs the teacher on mb's clean sequences, (seqs, L) causal
// within each document like the clean copy, under NoGrad, and keeps the
// final hidden states of the rows that predict mb's diff targets; norm is
// the step's count of targets with a teacher row. nil without
// distillation or without diff targets.
func (d *distiller) targets(mb *microBatch, norm float64) (dt *distillTargets) {
	if d == nil || len(mb.teach) == 0 {
		return nil
	}
	dev := d.m.Device
	S, L := int64(mb.seqs), int64(mb.L)
	// 1. Host side: a target without a teacher row reads row 0, which its
	// zero in `on` drops.
	rows := make([]int64, len(mb.teach))
	on := make([]float32, len(mb.teach))
	for k, r := range mb.teach {
		if r >= 0 {
			rows[k], on[k] = r, 1
		}
	}
	dt = &distillTargets{d: d, on: toDevice(torch.FromSlice(on), dev), scale: d.weight / norm}
	torch.NoGrad(func() {
		// 2. The teacher's inputs: ids (S, L), RoPE positions 0..L-1 as
		// the clean copy's, causal AND same-document mask (S, 1, L, L).
		if d.causalL != mb.L {
			d.causal.Free()
			d.causal, d.causalL = tensorMask(causalMask(mb.L), mb.L, dev), mb.L
		}
		ids := toDevice(torch.FromSlice(mb.clean, S, L), dev)
		docs := toDevice(torch.FromSlice(mb.cleanDocs, S, L), dev)
		pos := torch.Arange(0, L, torch.Int64, dev)
		mask := deviceMask(d.causal, docs)
		defer torch.Free(ids, docs, pos, mask)
		// 3. The forward, then the rows that predict a target: (N, C).
		h, err := d.m.Hidden(ids, model.ForwardOpts{Mask: mask, Positions: pos}) // (S, L, C)
		if err != nil {
			panic(&torch.Error{Op: "distill teacher forward", Msg: err.Error()})
		}
		flat := h.Reshape(S*L, h.Size(2))
		idx := toDevice(torch.FromSlice(rows), dev)
		dt.h = flat.IndexSelect(0, idx)
		torch.Free(h, flat, idx)
	})
	return dt
}

func (dt *distillTargets) free() {
	if dt != nil {
		torch.Free(dt.h, dt.on)
	}
}

// soft is the teacher's side of diff targets [s, s+k): computed before the
// student's logits of the chunk, so that the teacher's transient logits
// are gone by then.
func (dt *distillTargets) soft(s, k int64) softTargets {
	var st softTargets
	torch.NoGrad(func() {
		hc := dt.h.Narrow(0, s, k)                    // (k, C)
		logits := torch.Linear(hc, dt.d.m.Head, nil)  // (k, V) compute dtype
		lf := logits.To(torch.Float32, dt.d.m.Device) // (k, V)
		torch.Free(hc, logits)
		st = newSoftTargets(lf, dt.d.temp)
		lf.Free()
	})
	return st
}

// loss is scale * sum over diff targets [s, s+k) that have a teacher row
// of T^2 KL(teacher || student), from the student's float32 logits lf
// (k, V): a scalar with grad in lf.
func (dt *distillTargets) loss(st softTargets, lf *torch.Tensor, s, k int64) *torch.Tensor {
	kl := st.kl(lf, dt.d.temp) // (k)
	on := dt.on.Narrow(0, s, k)
	x := kl.Mul(on)
	sum := x.SumAll()
	defer torch.Free(kl, on, x, sum)
	return sum.MulScalar(dt.scale)
}

// softTargets are tempered teacher distributions over rows: p =
// softmax(z/T) (k, V) and sum_v p log p (k), float32, without grad.
type softTargets struct{ p, plogp *torch.Tensor }

// newSoftTargets tempers teacher logits z (k, V) float32.
func newSoftTargets(z *torch.Tensor, temp float64) softTargets {
	var st softTargets
	torch.NoGrad(func() {
		lp := logSoftmaxT(z, temp) // (k, V)
		st.p = lp.Exp()
		pl := st.p.Mul(lp)
		st.plogp = pl.Sum(1, false) // (k)
		torch.Free(lp, pl)
	})
	return st
}

// kl is T^2 KL(p || softmax(z/T)) per row of the student's logits z
// (k, V) float32: (k), with grad in z. KL rather than the soft
// cross-entropy -sum p log q: the same gradient (they differ by the
// teacher's entropy, a constant), but a value that is 0 when the student
// matches the teacher, so the logged term reads as a distance.
func (st softTargets) kl(z *torch.Tensor, temp float64) *torch.Tensor {
	lq := logSoftmaxT(z, temp) // (k, V)
	pl := st.p.Mul(lq)         // (k, V)
	cross := pl.Sum(1, false)  // (k)
	d := st.plogp.Sub(cross)   // (k)
	defer torch.Free(lq, pl, cross, d)
	return d.MulScalar(temp * temp)
}

func (st softTargets) free() { torch.Free(st.p, st.plogp) }

// logSoftmaxT is log softmax(z/T) over the last dimension of z (k, V).
func logSoftmaxT(z *torch.Tensor, temp float64) *torch.Tensor {
	if temp == 1 {
		return z.LogSoftmax(1)
	}
	zt := z.DivScalar(temp)
	defer zt.Free()
	return zt.LogSoftmax(1)
}
