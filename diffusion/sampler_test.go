package diffusion

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dllm/torch"
)

// Block size 1 with the shift is AR decoding: each token is the argmax of
// the previous position's logits, one forward per token.
func TestBlockSize1IsGreedyDecoding(t *testing.T) {
	m := loadTiny(t)
	s := NewSampler(m, tinySettings(1, true))
	chats := loadChats(t)
	prompts := [][]int64{{5}, {44, 73, 80, 339, 16, 322}, chats[0].IDs, chats[1].IDs}
	const n = 20
	for _, prompt := range prompts {
		res, err := generate(t, context.Background(), s, prompt, Options{MaxNewTokens: n}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := greedyLoop(t, m, prompt, n); !slices.Equal(res.IDs, want) {
			t.Errorf("prompt %v:\n got %v\nwant %v", prompt, res.IDs, want)
		}
		// The first token comes from the prefill, every other one costs
		// the forward that committed its predecessor.
		if res.Steps != n-1 || res.FinishReason != "length" {
			t.Errorf("prompt %v: %d steps, finish %q; want %d, length", prompt, res.Steps, res.FinishReason, n-1)
		}
	}
}

// The same tokens transformers' greedy generate produced.
func TestMatchesTransformersGreedy(t *testing.T) {
	m := loadTiny(t)
	for _, settings := range []*Settings{tinySettings(1, true), ARSettings()} {
		s := NewSampler(m, settings)
		for i, chat := range loadChats(t) {
			res, err := generate(t, context.Background(), s, chat.IDs, Options{MaxNewTokens: len(chat.Greedy16)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.IDs, chat.Greedy16) {
				t.Errorf("mask %d, chat %d:\n got %v\nwant %v", settings.MaskTokenID, i, res.IDs, chat.Greedy16)
			}
		}
	}
}

// A denoising step over the KV cache (prompt prefilled causally in chunks,
// one block committed causally) predicts what a single forward over the whole
// sequence with the equivalent mask predicts.
func TestCachedStepMatchesFullForward(t *testing.T) {
	m := loadTiny(t)
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]int64, 37)
	for i := range prompt {
		prompt[i] = rng.Int64N(tinyMask)
	}
	block1 := []int64{7, 8, 9, 10}
	canvas := &canvas{ids: []int64{11, tinyMask, 12, tinyMask}, fixed: []bool{true, false, true, false}}
	L, B := len(prompt), len(block1)
	full := append(append(append([]int64{}, prompt...), block1...), canvas.ids...)
	// Causal over the clean context (prompt and committed block); the block
	// being denoised sees all before it and itself.
	rows := maskedRows(t, m, full, func(q, k int) bool {
		if q < L+B {
			return k <= q
		}
		return k < L+(q-L)/B*B+B
	})
	for _, c := range []struct {
		engine string
		shift  bool
	}{{"eager", true}, {"eager", false}, {"fast", true}, {"fast", false}} {
		shift := c.shift
		s := NewSampler(m, tinySettings(B, shift))
		s.Eager = c.engine == "eager"
		defer s.Close()
		p, err := resolve(s.model, s.settings, prompt, Options{MaxNewTokens: 2 * B})
		if err != nil {
			t.Fatal(err)
		}
		p.chunk = 16 // three prefill chunks
		var tok []int64
		var conf []float64
		torch.NoGrad(func() {
			eng, err := s.engine(p)
			if err != nil {
				t.Fatal(err)
			}
			g, err := newGeneration(m, eng, p)
			if err != nil {
				t.Fatal(err)
			}
			defer g.free()
			if err := g.prefill(context.Background(), prompt); err != nil {
				t.Fatal(err)
			}
			if err := g.commit(block1); err != nil {
				t.Fatal(err)
			}
			pk, err := g.predict(canvas)
			if err != nil {
				t.Fatal(err)
			}
			tok, conf = pk.wait()
		})
		for i := range B {
			row := L + B + i // the row that predicts position i without the shift
			if shift {
				row--
			}
			wantTok, wantConf := argmax(rows[row], tinyMask)
			if tok[i] != wantTok || math.Abs(conf[i]-wantConf) > 1e-5 {
				t.Errorf("%s engine, shift %v, position %d: (%d, %.6f), full forward (%d, %.6f)", c.engine, shift, i, tok[i], conf[i], wantTok, wantConf)
			}
		}
	}
}

// Threshold 1.0 commits one token per step, so a block of B tokens takes
// B forwards, the first of which also commits the block before it (with the
// shift, the step that leaves only the first position needs no forward).
func TestThresholdOneCommitsOneTokenPerStep(t *testing.T) {
	m := loadTiny(t)
	prompt := loadChats(t)[0].IDs
	const B, blocks = 4, 3
	for _, shift := range []bool{true, false} {
		s := NewSampler(m, tinySettings(B, shift))
		var got []Block
		res, err := generate(t, context.Background(), s, prompt, Options{Threshold: 1, MaxNewTokens: B * blocks},
			func(b Block) (bool, error) { got = append(got, b); return false, nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != blocks || len(res.IDs) != B*blocks {
			t.Fatalf("shift %v: %d blocks, %d tokens", shift, len(got), len(res.IDs))
		}
		total := 0
		for k, b := range got {
			most := B // denoising steps; the first carries the previous block's commit
			least := most
			if shift {
				least--
			}
			if b.Steps < least || b.Steps > most {
				t.Errorf("shift %v, block %d: %d steps, want %d..%d", shift, k, b.Steps, least, most)
			}
			total += b.Steps
		}
		if res.Steps != total || res.TPF != float64(len(res.IDs))/float64(total) {
			t.Errorf("shift %v: result steps %d, TPF %v; blocks add up to %d", shift, res.Steps, res.TPF, total)
		}
	}
}

// Larger blocks at the default threshold run, never emit the mask and
// commit at least one token per step.
func TestLargerBlocks(t *testing.T) {
	m := loadTiny(t)
	prompt := loadChats(t)[1].IDs
	for _, B := range []int{4, 8} {
		res, err := generate(t, context.Background(), NewSampler(m, tinySettings(B, true)), prompt,
			Options{Threshold: 0.9, MaxNewTokens: 32}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.IDs) != 32 || res.FinishReason != "length" {
			t.Errorf("block %d: %d tokens, finish %q", B, len(res.IDs), res.FinishReason)
		}
		for _, id := range res.IDs {
			if id < 0 || id >= int64(m.Config.VocabSize) || id == tinyMask {
				t.Errorf("block %d: generated token %d", B, id)
			}
		}
		if res.Steps > 2*len(res.IDs) {
			t.Errorf("block %d: %d steps for %d tokens", B, res.Steps, len(res.IDs))
		}
	}
}

// FixedCommit k commits exactly k positions per denoising forward whatever
// the weights: a block of B takes ceil(B/k) forwards, the first of which
// also commits the block before it; a block of 1 with the shift needs none
// of its own (its one position is the carry's), only the commit forward.
func TestFixedCommitStepCounts(t *testing.T) {
	m := loadTiny(t)
	prompt := loadChats(t)[0].IDs
	cases := []struct {
		block, k int
		shift    bool
	}{
		{8, 1, true}, {8, 1, false}, {8, 3, true}, {8, 4, true}, {8, 4, false},
		{7, 3, true}, {5, 8, true}, {1, 1, true},
	}
	for _, c := range cases {
		const blocks = 3
		s := NewSampler(m, tinySettings(c.block, c.shift))
		var got []Block
		res, err := generate(t, context.Background(), s, prompt,
			Options{FixedCommit: c.k, MaxNewTokens: c.block * blocks},
			func(b Block) (bool, error) { got = append(got, b); return false, nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != blocks || len(res.IDs) != c.block*blocks {
			t.Fatalf("%+v: %d blocks, %d tokens", c, len(got), len(res.IDs))
		}
		denoise := (c.block + c.k - 1) / c.k
		for i, b := range got {
			want := denoise
			if c.block == 1 && c.shift {
				want = min(i, 1) // the previous block's commit forward
			}
			if b.Steps != want {
				t.Errorf("%+v, block %d: %d steps, want %d", c, i, b.Steps, want)
			}
		}
		for _, id := range res.IDs {
			if id == tinyMask {
				t.Errorf("%+v: emitted the mask token", c)
			}
		}
	}
}

// Reserve makes the decoder that later generations within its context
// reuse, and they generate what a sampler without it does.
func TestReserveMakesTheDecoderOnce(t *testing.T) {
	m := loadTiny(t)
	prompt := []int64{44, 73, 80, 339, 16, 322}
	o := Options{MaxNewTokens: 12, ContextLimit: 200}
	want, err := generate(t, context.Background(), NewSampler(m, tinySettings(4, true)), prompt, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSampler(m, tinySettings(4, true))
	defer s.Close()
	for _, bad := range [][2]int{{0, 4}, {200, 0}} {
		if err := s.Reserve(bad[0], bad[1]); err == nil {
			t.Errorf("Reserve(%d, %d): no error", bad[0], bad[1])
		}
	}
	if err := s.Reserve(200, 4); err != nil {
		t.Fatal(err)
	}
	d := s.dec
	if d == nil || d.Max < 200 {
		t.Fatalf("after Reserve(200, 4) the decoder is %+v", d)
	}
	for range 2 {
		got, err := s.Generate(context.Background(), prompt, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.IDs, want.IDs) {
			t.Errorf("after Reserve: %v, without: %v", got.IDs, want.IDs)
		}
		if s.dec != d {
			t.Error("a generation within the reserved context made a new decoder")
		}
	}
	e := NewSampler(m, tinySettings(4, true))
	e.Eager = true
	if err := e.Reserve(200, 4); err != nil || e.dec != nil {
		t.Errorf("eager Reserve: %v, decoder %v", err, e.dec)
	}
}
