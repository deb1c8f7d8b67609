package model

import (
	"testing"

	"dllm/torch"
)

// decoderRows runs ids through d and returns their logit rows.
func decoderRows(t *testing.T, d *Decoder, ids []int64, causal int) [][]float64 {
	t.Helper()
	logits, err := d.Forward(ids, causal, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	defer logits.Free()
	l := logits.Reshape(1, int64(len(ids)), -1)
	defer l.Free()
	return rows(t, l)
}

// The decoder's forward, in chunks over its own KV cache, gives
// transformers' logits: causal for the clean context, and for a block
// that sees itself (block-causal with the block at the end).
func TestDecoderMatchesTransformers(t *testing.T) {
	m, e := loadTiny(t)
	defer m.Free()
	d, err := m.NewDecoder(40, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	ids := e.InputIDs
	n := len(ids)
	// 1. Causal, in three uneven chunks: every row is transformers' causal row.
	var got [][]float64
	for _, cut := range [][2]int{{0, 5}, {5, 6}, {6, n}} {
		got = append(got, decoderRows(t, d, ids[cut[0]:cut[1]], cut[1]-cut[0])...)
		if err := d.Commit(int64(cut[1] - cut[0])); err != nil {
			t.Fatal(err)
		}
	}
	if r := rowRelErr(got, e.CausalLogits); r > 1e-4 {
		t.Errorf("causal: relative error %.2e against transformers", r)
	}
	// 2. The whole input as one block from position 0 is the bidirectional pass.
	d.Reset()
	if r := rowRelErr(decoderRows(t, d, ids, 0), e.BidirectionalLogits); r > 1e-4 {
		t.Errorf("bidirectional: relative error %.2e against transformers", r)
	}
	// 3. A block of 4 after a causal prefix is block-causal attention's last
	//    block (checked against transformers above through Forward).
	want := forward(t, m, ids, ForwardOpts{Attention: Attention{Kind: BlockCausal, Block: 4}})
	d.Reset()
	p := n - n%4
	if p == n {
		p = n - 4
	}
	for start := 0; start < p; start += 4 {
		blk := ids[start : start+4]
		// Denoising-style forward first: its keys are overwritten by the
		// commit, which is what the sampler relies on.
		if _, err := d.Forward(blk, 0, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Forward(blk, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := d.Commit(4); err != nil {
			t.Fatal(err)
		}
	}
	if r := rowRelErr(decoderRows(t, d, ids[p:], 0), want[p:]); r > 1e-5 {
		t.Errorf("last block over a block-causal prefix: %.2e from Forward", r)
	}
	// 4. A committed block and the next block in one forward: the first 4
	//    rows are transformers' causal rows, the last block's rows those of
	//    committing the block first and running the next one alone.
	d.Reset()
	if _, err := d.Forward(ids[:p], p, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(int64(p)); err != nil {
		t.Fatal(err)
	}
	alone := decoderRows(t, d, ids[p:], 0)
	d.Reset()
	if _, err := d.Forward(ids[:p-4], p-4, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(int64(p - 4)); err != nil {
		t.Fatal(err)
	}
	got = decoderRows(t, d, ids[p-4:], 4)
	if r := rowRelErr(got[:4], e.CausalLogits[p-4:p]); r > 1e-4 {
		t.Errorf("committed block in a mixed forward: %.2e from transformers' causal rows", r)
	}
	if r := rowRelErr(got[4:], alone); r > 1e-5 {
		t.Errorf("next block in a mixed forward: %.2e from running it after the commit", r)
	}
}

// Stacked projections (QKV with biases, gate-up) give Forward's logits,
// and Forward on the model still works after stacking.
func TestDecoderWithBiasesMatchesForward(t *testing.T) {
	cfg, err := LoadConfig(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AttentionBias = true
	m, err := NewRandom(cfg, LoadOptions{DType: torch.Float32}, 3, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	ids := []int64{3, 17, 42, 9, 100, 7, 64, 5, 11, 250}
	want := forward(t, m, ids, ForwardOpts{Attention: Attention{Kind: Causal}})
	d, err := m.NewDecoder(16, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	if r := rowRelErr(decoderRows(t, d, ids, len(ids)), want); r > 1e-5 {
		t.Errorf("decoder vs Forward: %.2e", r)
	}
	again := forward(t, m, ids, ForwardOpts{Attention: Attention{Kind: Causal}})
	if r := rowRelErr(again, want); r > 1e-6 {
		t.Errorf("Forward after stacking changed by %.2e", r)
	}
}

func TestDecoderErrors(t *testing.T) {
	m, _ := loadTiny(t)
	defer m.Free()
	if _, err := m.NewDecoder(0, 0); err == nil {
		t.Error("a decoder for 0 positions should fail")
	}
	d, err := m.NewDecoder(8, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	if _, err := d.Forward(make([]int64, 9), 9, 0); err == nil {
		t.Error("9 tokens in a context of 8 should fail")
	}
	if _, err := d.Forward(nil, 0, 0); err == nil {
		t.Error("no tokens should fail")
	}
	if _, err := d.Forward([]int64{1, 2}, 2, 3); err == nil {
		t.Error("3 logit rows of 2 tokens should fail")
	}
	if _, err := d.Forward([]int64{1, 2}, 3, 1); err == nil {
		t.Error("3 causal positions of 2 tokens should fail")
	}
	if err := d.Commit(9); err == nil {
		t.Error("committing past the end should fail")
	}
	if l, err := d.Forward([]int64{1, 2}, 2, 0); err != nil || l != nil {
		t.Errorf("rows 0: %v, %v; want nil, nil", l, err)
	}
	// Off the GPU no step is queued on the device's picks.
	picks := torch.Zeros([]int64{4}, torch.Float64, torch.CPU)
	defer picks.Free()
	if l, ok, err := d.ForwardNext(2, picks, 0, 1, false, 2); ok || l != nil || err != nil {
		t.Errorf("ForwardNext on the CPU: %v, %v, %v; want nil, false, nil", l, ok, err)
	}
	if _, _, err := d.ForwardNext(9, picks, 0, 1, false, 1); err == nil {
		t.Error("ForwardNext of 9 tokens in a context of 8 should fail")
	}
	if _, _, err := d.ForwardNext(2, picks, 0, 0, false, 1); err == nil {
		t.Error("ForwardNext committing 0 tokens should fail")
	}
}

// batchRows runs the prompts (sequence i in slot slots[i]) in one
// forward of b, then their blocks (the first causal[i] positions causal)
// in another, and returns each block's logit rows. With runs > 1 the
// blocks' forward runs that many times (on a GPU: eagerly, then captured
// into a graph, then from it), the rows of run r in out[r*len(blocks)+i].
func batchRows(t *testing.T, b *BatchDecoder, slots []int, prompts, blocks [][]int64, causal []int, runs int) [][][]float64 {
	t.Helper()
	pre, step := batchSeqs(slots, prompts, blocks, causal, nil)
	var out [][][]float64
	torch.NoGrad(func() {
		if l, err := b.Forward(pre); err != nil || l != nil {
			t.Fatalf("prompts: %v, %v", l, err)
		}
		for range runs {
			logits, err := b.Forward(step)
			if err != nil {
				t.Fatal(err)
			}
			l := logits.Reshape(1, logits.Shape()[0], -1)
			got := rows(t, l)
			torch.Free(l, logits)
			for _, blk := range blocks {
				out = append(out, got[:len(blk)])
				got = got[len(blk):]
			}
		}
	})
	return out
}

// batchSeqs lays out batchRows' two forwards: the prompts (sequence i in
// slot slots[i]), then the blocks after them, block i asking for the logits
// of its last ask[i] rows (all of them where ask is nil).
func batchSeqs(slots []int, prompts, blocks [][]int64, causal, ask []int) (pre, step []torch.BatchSeq) {
	for i := range prompts {
		rows := len(blocks[i])
		if ask != nil {
			rows = ask[i]
		}
		pre = append(pre, torch.BatchSeq{Slot: slots[i], IDs: prompts[i], Causal: len(prompts[i])})
		step = append(step, torch.BatchSeq{Slot: slots[i], IDs: blocks[i], Pos: int64(len(prompts[i])), Causal: causal[i], Rows: rows})
	}
	return pre, step
}

// tinyBatch is three sequences for the tiny model's batched forwards, in
// slots out of order: their prompts, of different lengths, and a block
// each after them, the last with its first two positions causal (a
// committed block and the next).
func tinyBatch(e tinyExpected) (prompts, blocks [][]int64, causal, slots []int) {
	ids := e.InputIDs
	return [][]int64{ids[:7], ids[:12], ids[3:8]}, [][]int64{{5, 6, 7, 8}, {9, 10, 11, 12}, {13, 14, 15, 16, 17, 18}},
		[]int{0, 0, 2}, []int{2, 0, 1}
}

// A batched forward gives each sequence the logits it gets alone: three
// sequences of different lengths in slots out of order, their prompts in
// one forward, then a denoising block each (one of them with causal rows
// first: a committed block and the next), against a decoder each.
func TestBatchDecoderMatchesAlone(t *testing.T) {
	m, e := loadTiny(t)
	defer m.Free()
	prompts, blocks, causal, slots := tinyBatch(e)
	// 1. Alone.
	var want [][][]float64
	for i := range prompts {
		d, err := m.NewDecoder(40, 0)
		if err != nil {
			t.Fatal(err)
		}
		decoderRows(t, d, prompts[i], len(prompts[i]))
		if err := d.Commit(int64(len(prompts[i]))); err != nil {
			t.Fatal(err)
		}
		want = append(want, decoderRows(t, d, blocks[i], causal[i]))
		d.Free()
	}
	// 2. Together.
	b, err := m.NewBatchDecoder(40, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	for i, g := range batchRows(t, b, slots, prompts, blocks, causal, 1) {
		if e := rowRelErr(g, want[i]); e > 1e-5 {
			t.Errorf("sequence %d (slot %d): batched logits differ from alone by %.2e", i, slots[i], e)
		}
	}
	// 3. Together, each asking for fewer rows than it has tokens (the
	//    logits of the rows asked for, in order: a gather, where all rows
	//    take none): none of the first, the last 3 of the second, all of
	//    the third.
	b2, err := m.NewBatchDecoder(40, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Free()
	ask := []int{0, 3, len(blocks[2])}
	pre, step := batchSeqs(slots, prompts, blocks, causal, ask)
	torch.NoGrad(func() {
		if _, err := b2.Forward(pre); err != nil {
			t.Fatal(err)
		}
		logits, err := b2.Forward(step)
		if err != nil {
			t.Fatal(err)
		}
		l := logits.Reshape(1, logits.Shape()[0], -1)
		got := rows(t, l)
		torch.Free(l, logits)
		for i, n := range ask {
			if e := rowRelErr(got[:n], want[i][len(want[i])-n:]); e > 1e-5 {
				t.Errorf("sequence %d, its last %d rows: differ from alone by %.2e", i, n, e)
			}
			got = got[n:]
		}
	})
	// A sequence outside the slots, or past the context, is an error.
	for _, s := range []torch.BatchSeq{{Slot: 3, IDs: []int64{1}}, {Slot: 0, IDs: []int64{1}, Pos: 40}} {
		if _, err := b.Forward([]torch.BatchSeq{s}); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
}

// A sequence alone in slot 0 runs through the single-stream decoder
// (ForwardOne) and gets what a Decoder of its own gives; another slot is
// an error.
func TestBatchDecoderForwardOne(t *testing.T) {
	m, e := loadTiny(t)
	defer m.Free()
	prompt, block := e.InputIDs[:9], []int64{5, 6, 7, 8}
	d, err := m.NewDecoder(40, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	decoderRows(t, d, prompt, len(prompt))
	if err := d.Commit(int64(len(prompt))); err != nil {
		t.Fatal(err)
	}
	want := decoderRows(t, d, block, 0)
	b, err := m.NewBatchDecoder(40, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if l, err := b.ForwardOne(torch.BatchSeq{IDs: prompt, Causal: len(prompt)}); err != nil || l != nil {
		t.Fatalf("prompt: %v, %v", l, err)
	}
	logits, err := b.ForwardOne(torch.BatchSeq{IDs: block, Pos: int64(len(prompt)), Rows: len(block)})
	if err != nil {
		t.Fatal(err)
	}
	defer logits.Free()
	l := logits.Reshape(1, int64(len(block)), -1)
	defer l.Free()
	if e := rowRelErr(rows(t, l), want); e > 1e-6 {
		t.Errorf("ForwardOne differs from a decoder alone by %.2e", e)
	}
	if _, err := b.ForwardOne(torch.BatchSeq{Slot: 1, IDs: block}); err == nil {
		t.Error("ForwardOne in slot 1: no error")
	}
}
