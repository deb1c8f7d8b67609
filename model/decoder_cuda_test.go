package model

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"testing"

	"dllm/torch"
)

// needCUDA skips the test without a CUDA device.
func needCUDA(t *testing.T) {
	t.Helper()
	if err := torch.Load(); err != nil || !torch.CUDAAvailable() {
		t.Skip("no CUDA device")
	}
}

// shapeConfig is MiniCPM5-2B's config, for a GPU test (skipped without one).
func shapeConfig(t *testing.T) *Config {
	t.Helper()
	needCUDA(t)
	cfg, err := LoadConfig("../testdata/minicpm5-2b-shape")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// On a GPU (skipped elsewhere): the decoder's fast path (FlashAttention,
// CUDA graphs, stacked projections) in bf16 is as close to a float32 truth
// as the plain bf16 path is, for every kind of decode forward, before and
// after its graphs are captured, with its block steps' attention through
// the shim's kernel and through cuDNN. MiniCPM5-2B's shape unless
// $DLLM_TEST_CONFIG names another config.json directory; in f16 instead
// when $DLLM_TEST_DTYPE is f16.
//
//	go test -c -o model.test ./model && ./model.test -test.run CUDA -test.v
func TestDecoderCUDAMatchesPlainPath(t *testing.T) {
	needCUDA(t)
	dir := os.Getenv("DLLM_TEST_CONFIG")
	if dir == "" {
		dir = "../testdata/minicpm5-2b-shape"
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	dev, dt := torch.CUDA(0), testDType()
	m16, m32 := randomPair(t, cfg, dev, dt)
	// 2. The decoder's block steps attend through cuDNN past 1024 keys
	// (the context runs from 1000 to ~1200), in graphs captured on their
	// second use or, prepared, before the first; and without the norm
	// folded into the projections or the persistent kernel (the decoder's
	// options for memory and for GPUs shared through MPS).
	for _, c := range []struct {
		name               string
		prepare, plainPost bool
	}{{"graphs on second use", false, false}, {"prepared", true, false}, {"no norm fold, no persistent kernel", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			m16.NoNormFold, m16.NoPersistentKernel = c.plainPost, c.plainPost
			defer func() { m16.NoNormFold, m16.NoPersistentKernel = false, false }()
			checkDecoder(t, cfg, dev, dt, m16, m32, c.prepare)
		})
	}
}

// checkDecoder runs m16's decoder, m16 and m32 over one context: the three
// paths of TestDecoderCUDAMatchesPlainPath; prepare: the decoder's graphs
// for the cuDNN path's block steps are captured first (Decoder.Prepare).
func checkDecoder(t *testing.T, cfg *Config, dev torch.Device, dt torch.DType, m16, m32 *Model, prepare bool) {
	const ctx, block = 1000, 32
	c16, err := m16.NewCache(1, 2048)
	if err != nil {
		t.Fatal(err)
	}
	defer c16.Free()
	c32, err := m32.NewCache(1, 2048)
	if err != nil {
		t.Fatal(err)
	}
	defer c32.Free()
	// Graphs up to two blocks, as the engine's: fused commits replay too.
	d, err := m16.NewDecoder(2048, 2*block)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	if prepare {
		// Past 1024 keys up to 2048: a graph per bucket (the shim cuts
		// buckets by cuDNN's 128-key tiles), for block steps and fused
		// commits.
		n, err := d.Prepare(block, 2048)
		if err != nil {
			t.Fatal(err)
		}
		const kinds = 2
		if n < kinds || d.Graphs() != n {
			t.Fatalf("Prepare captured %d graphs (decoder: %d), want %d or more", n, d.Graphs(), kinds)
		}
		t.Logf("Prepare captured %d graphs", n)
	}
	ids := randomIDs(cfg, 1)
	fast := func(x []int64, causal int) [][]float64 {
		var out [][]float64
		torch.NoGrad(func() { out = decoderRows(t, d, x, causal) })
		return out
	}
	commit := func(n int) {
		for _, err := range []error{c16.Commit(int64(n)), c32.Commit(int64(n)), d.Commit(int64(n))} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	type step struct {
		name   string
		n      int
		causal int // leading positions attending causally
		commit int // positions committed after the step
	}
	// A block step on an empty cache first: with random weights attention
	// is nearly uniform, so at 1000 keys a block's own queries, keys and
	// values move its rows by ~3%; here they are all it sees (a QKV
	// projection reading the wrong weights passed the later steps).
	steps := []step{{"block 32 at 0", block, 0, 0}, {"prefill 512", 512, 512, 512},
		{"prefill 488", ctx - 512, ctx - 512, ctx - 512}}
	for i := 0; i < 3; i++ { // the second of each length captures, the third replays
		steps = append(steps, step{"block 32 (denoise)", block, 0, 0},
			step{"block 32 (commit)", block, block, block}, step{"AR 1", 1, 1, 1},
			step{"commit 32 + block 32", 2 * block, block, block})
	}
	t.Logf("%-20s %6s %12s %12s %12s", "forward", "pos", "fast-f32", "plain-f32", "fast-plain")
	for _, s := range steps {
		x := ids(s.n)
		pos := d.Len
		want := plainRows(t, m32, c32, x, s.causal)
		p16 := plainRows(t, m16, c16, x, s.causal)
		f16 := fast(x, s.causal)
		ef, ep, efp := rowRelErr(f16, want), rowRelErr(p16, want), rowRelErr(f16, p16)
		t.Logf("%-20s %6d %12.2e %12.2e %12.2e", s.name, pos, ef, ep, efp)
		// bf16 rounding differs between the paths (fused matmuls, flash
		// against SDPA); the fast path must not be further from the truth.
		if ef > 1.5*ep+1e-3 {
			t.Errorf("%s at %d: fast path %.2e from float32, plain %v %.2e", s.name, pos, ef, dt, ep)
		}
		if s.commit > 0 {
			commit(s.commit)
		}
	}
	t.Logf("graphs captured: %d", d.Graphs())
	if d.Graphs() == 0 {
		t.Error("no CUDA graph was captured")
	}
}

// testDType is bf16, or f16 when $DLLM_TEST_DTYPE is f16.
func testDType() torch.DType {
	if os.Getenv("DLLM_TEST_DTYPE") == "f16" {
		return torch.Float16
	}
	return torch.BFloat16
}

// randomPair builds one set of random weights of cfg's shape in dt and the
// same weights in float32, on dev; freed when the test ends.
func randomPair(t *testing.T, cfg *Config, dev torch.Device, dt torch.DType) (m16, m32 *Model) {
	t.Helper()
	shapes := map[string][]int64{}
	for _, s := range ExpectedTensors(cfg) {
		shapes[s.Name] = s.Shape
	}
	torch.ManualSeed(7)
	w16 := map[string]*torch.Tensor{}
	var err error
	m16, err = build(cfg, LoadOptions{Device: dev, DType: dt}, func(name string) *torch.Tensor {
		s := shapes[name]
		if len(s) == 1 {
			w16[name] = torch.Ones(s, dt, dev)
		} else {
			r := torch.Randn(s, dt, dev)
			w16[name] = r.MulScalar(0.02)
			r.Free()
		}
		return w16[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m16.Free)
	m32, err = build(cfg, LoadOptions{Device: dev, DType: torch.Float32}, func(name string) *torch.Tensor {
		return w16[name].To(torch.Float32, dev)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m32.Free)
	return m16, m32
}

// plainRows runs x on m over c with its first causal positions causal
// and the rest seeing everything, through Forward and an explicit mask
// when mixed, and returns its logit rows.
func plainRows(t *testing.T, m *Model, c *KVCache, x []int64, causal int) [][]float64 {
	t.Helper()
	dev := m.Device
	o := ForwardOpts{Attention: Attention{Kind: Bidirectional}, Cache: c}
	T, S := int64(len(x)), c.Len+int64(len(x))
	switch {
	case causal == len(x):
		o.Attention.Kind = Causal
	case causal > 0:
		allowed := make([]bool, T*S)
		for q := int64(0); q < T; q++ {
			for k := int64(0); k < S; k++ {
				allowed[q*S+k] = q >= int64(causal) || k <= c.Len+q
			}
		}
		cpu := torch.FromSlice(allowed, 1, 1, T, S)
		defer cpu.Free()
		o.Mask = cpu.To(torch.Bool, dev)
		defer o.Mask.Free()
	}
	var out [][]float64
	torch.NoGrad(func() {
		in := torch.FromSlice(x, 1, int64(len(x)))
		defer in.Free()
		g := in.To(torch.Int64, dev)
		defer g.Free()
		l, err := m.Forward(g, o)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Free()
		out = rows(t, l)
	})
	return out
}

// On a GPU: a batched forward (continuous batching) gives each sequence
// logits as close to the float32 truth as its single-stream decoder's:
// three sequences of different contexts in slots out of order, their
// prompts in one forward, then a block step each (one after a committed
// block, as the sampler's first step of a block runs), three times: eager,
// captured into its bucket's graph (padded to 4 sequences and 128 rows),
// and from the graph. Random weights of MiniCPM5-2B's shape, as
// TestDecoderCUDAMatchesPlainPath.
func TestBatchDecoderCUDA(t *testing.T) {
	cfg := shapeConfig(t)
	dev, dt := torch.CUDA(0), testDType()
	m16, m32 := randomPair(t, cfg, dev, dt)
	const block, ctx = 32, 2048
	ids := randomIDs(cfg, 3)
	prompts := [][]int64{ids(700), ids(1100), ids(300)}
	steps := [][]int64{ids(block), ids(2 * block), ids(block)}
	causal := []int{0, block, 0}
	slots := []int{2, 0, 1}
	b, err := m16.NewBatchDecoder(ctx, len(slots), 2*block)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	const runs = 3
	got := batchRows(t, b, slots, prompts, steps, causal, runs)
	for i := range prompts {
		// The truth (float32, plain path) and the single-stream decoder.
		c32, err := m32.NewCache(1, ctx)
		if err != nil {
			t.Fatal(err)
		}
		torch.NoGrad(func() {
			in := torch.FromSlice(prompts[i], 1, int64(len(prompts[i])))
			defer in.Free()
			x := in.To(torch.Int64, dev)
			defer x.Free()
			h, err := m32.Hidden(x, ForwardOpts{Attention: Attention{Kind: Causal}, Cache: c32})
			if err != nil {
				t.Fatal(err)
			}
			h.Free()
		})
		if err := c32.Commit(int64(len(prompts[i]))); err != nil {
			t.Fatal(err)
		}
		want := plainRows(t, m32, c32, steps[i], causal[i])
		c32.Free()
		d, err := m16.NewDecoder(ctx, 2*block)
		if err != nil {
			t.Fatal(err)
		}
		var alone [][]float64
		torch.NoGrad(func() {
			if _, err := d.Forward(prompts[i], len(prompts[i]), 0); err != nil {
				t.Fatal(err)
			}
			if err := d.Commit(int64(len(prompts[i]))); err != nil {
				t.Fatal(err)
			}
			alone = decoderRows(t, d, steps[i], causal[i])
		})
		d.Free()
		for r := range runs {
			batched := got[r*len(prompts)+i]
			eb, ea := rowRelErr(batched, want), rowRelErr(alone, want)
			t.Logf("sequence %d (slot %d, context %d), run %d: batched %.2e from float32, alone %.2e, batched-alone %.2e",
				i, slots[i], len(prompts[i]), r, eb, ea, rowRelErr(batched, alone))
			if eb > 1.5*ea+1e-3 {
				t.Errorf("sequence %d, run %d: batched %.2e from float32, alone %.2e", i, r, eb, ea)
			}
		}
	}
	// A new sequence alone in slot 0 (ForwardOne: the single-stream path,
	// whose cuDNN attention past 1024 keys reads the slots past the
	// context and needs them zero) ends before where the batch wrote slot
	// 0 (1164): it gets what a fresh decoder gives.
	prompt, next := ids(1050), ids(block)
	fresh, err := m16.NewDecoder(ctx, 2*block)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Free()
	var want, got1 [][]float64
	torch.NoGrad(func() {
		if _, err := fresh.Forward(prompt, len(prompt), 0); err != nil {
			t.Fatal(err)
		}
		if err := fresh.Commit(int64(len(prompt))); err != nil {
			t.Fatal(err)
		}
		want = decoderRows(t, fresh, next, 0)
		if _, err := b.ForwardOne(torch.BatchSeq{IDs: prompt, Causal: len(prompt)}); err != nil {
			t.Fatal(err)
		}
		logits, err := b.ForwardOne(torch.BatchSeq{IDs: next, Pos: int64(len(prompt)), Rows: len(next)})
		if err != nil {
			t.Fatal(err)
		}
		defer logits.Free()
		l := logits.Reshape(1, int64(len(next)), -1)
		defer l.Free()
		got1 = rows(t, l)
	})
	if e := rowRelErr(got1, want); e > 1e-3 {
		t.Errorf("a new sequence alone in slot 0 after the batch: %.2e from a fresh decoder", e)
	}
}

// randomIDs returns a source of n random token ids of cfg's vocabulary, the
// same sequence for the same seed.
func randomIDs(cfg *Config, seed uint64) func(n int) []int64 {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	return func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = rng.Int64N(int64(cfg.VocabSize))
		}
		return out
	}
}

// On a GPU: the next step of a fixed-commit block queued with its canvas
// made on the device (ForwardNext) gives the logits Forward gives for the
// canvas the host makes from the same picks, bit for bit, with and without
// the shift; after a forward without a graph it queues nothing. Random
// weights of MiniCPM5-2B's shape, past the context from which block steps
// attend through cuDNN.
func TestDecoderCUDAForwardNext(t *testing.T) {
	cfg := shapeConfig(t)
	m, err := NewRandom(cfg, LoadOptions{Device: torch.CUDA(0), DType: torch.BFloat16}, 5, 0.02)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	d, err := m.NewDecoder(4096, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	rng := rand.New(rand.NewPCG(5, 6))
	mask := int64(cfg.VocabSize - 1)
	for _, n := range []int{512, 512, 76} {
		chunk := make([]int64, n)
		for i := range chunk {
			chunk[i] = rng.Int64N(mask)
		}
		if _, err := d.Forward(chunk, n, 0); err != nil {
			t.Fatal(err)
		}
		if err := d.Commit(int64(n)); err != nil {
			t.Fatal(err)
		}
	}
	host := func(l *torch.Tensor, err error) []float32 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer l.Free()
		return torch.ToSlice[float32](l)
	}
	// next is the host's canvas.commitTop (diffusion), written again: the k
	// most probable masked positions, position 0 first with shift.
	next := func(canvas []int64, both []float64, k int, shift bool) []int64 {
		n := len(canvas)
		var open []int
		for i, id := range canvas {
			if id == mask {
				open = append(open, i)
			}
		}
		rank := func(i int) float64 {
			if shift && i == 0 {
				return math.Inf(1)
			}
			return both[i]
		}
		sort.SliceStable(open, func(a, b int) bool { return rank(open[a]) > rank(open[b]) })
		out := slices.Clone(canvas)
		for _, i := range open[:min(k, len(open))] {
			out[i] = int64(both[n+i])
		}
		return out
	}
	canvas := make([]int64, 32)
	for i := range canvas {
		canvas[i] = mask
	}
	canvas[5], canvas[17] = 7, 9 // fixed before
	for range 2 {                // eager, captured
		host(d.Forward(canvas, 0, 32))
	}
	for _, shift := range []bool{false, true} {
		l, err := d.Forward(canvas, 0, 32) // from the graph
		if err != nil {
			t.Fatal(err)
		}
		picks := torch.PickGreedy(l, mask)
		l.Free()
		got := host(func() (*torch.Tensor, error) {
			l, ok, err := d.ForwardNext(32, picks, mask, 3, shift, 32)
			if err == nil && !ok {
				t.Fatal("ForwardNext after a forward from its graph queued nothing")
			}
			return l, err
		}())
		want := next(canvas, torch.ToSlice[float64](picks), 3, shift)
		picks.Free()
		if w := host(d.Forward(want, 0, 32)); !slices.Equal(got, w) {
			t.Errorf("shift %v: the device's canvas gave other logits than the host's %v", shift, want)
		}
	}
	// After a forward that ran without a graph, nothing is queued.
	if _, err := d.Forward(canvas[:20], 0, 0); err != nil {
		t.Fatal(err)
	}
	picks := torch.Zeros([]int64{64}, torch.Float64, torch.CUDA(0))
	defer picks.Free()
	if l, ok, err := d.ForwardNext(32, picks, mask, 3, false, 32); ok || err != nil {
		l.Free()
		t.Errorf("ForwardNext after an eager forward: queued %v, %v", ok, err)
	}
}

// On a GPU: the batched forward of a model whose head dim is not 128 (the
// tiny fixture's 16), whose attention is two FlashAttention 2
// variable-length calls a layer instead of the shim's kernel, gives each
// sequence logits as close to the float32 truth (the CPU's) as its
// single-stream decoder's, in bf16; the sequences as in
// TestBatchDecoderMatchesAlone.
func TestBatchDecoderCUDAVarlen(t *testing.T) {
	needCUDA(t)
	cpu, e := loadTiny(t)
	defer cpu.Free()
	gpu, err := Load(tinyDir, LoadOptions{Device: torch.CUDA(0), DType: torch.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Free()
	prompts, blocks, causal, slots := tinyBatch(e)
	alone := func(m *Model, i int) [][]float64 {
		d, err := m.NewDecoder(40, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Free()
		decoderRows(t, d, prompts[i], len(prompts[i]))
		if err := d.Commit(int64(len(prompts[i]))); err != nil {
			t.Fatal(err)
		}
		return decoderRows(t, d, blocks[i], causal[i])
	}
	b, err := gpu.NewBatchDecoder(40, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	for i, got := range batchRows(t, b, slots, prompts, blocks, causal, 1) {
		want, one := alone(cpu, i), alone(gpu, i)
		eb, ea := rowRelErr(got, want), rowRelErr(one, want)
		t.Logf("sequence %d (slot %d): batched %.2e from float32, alone %.2e", i, slots[i], eb, ea)
		if eb > 1.5*ea+1e-3 {
			t.Errorf("sequence %d: batched %.2e from float32, alone %.2e", i, eb, ea)
		}
	}
}
