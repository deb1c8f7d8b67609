package diffusion

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"dllm/model"
	"dllm/torch"
)

// shapeModel is a model of MiniCPM5-2B's shape with random weights of dt
// on the GPU; the test is skipped without one.
func shapeModel(t *testing.T, dt torch.DType) (*model.Model, *model.Config) {
	t.Helper()
	if err := torch.Load(); err != nil || !torch.CUDAAvailable() {
		t.Skip("no CUDA device")
	}
	cfg, err := model.LoadConfig("../testdata/minicpm5-2b-shape")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.NewRandom(cfg, model.LoadOptions{Device: torch.CUDA(0), DType: dt}, 3, 0.02)
	if err != nil {
		t.Fatal(err)
	}
	return m, cfg
}

// On a GPU (skipped elsewhere): a fixed-commit generation whose steps are
// queued before the host reads the picks of the step before (denoise)
// gives the tokens and step counts of the one that is not
// (Sampler.noAhead), also when a stop token ends a block early and the
// queued step runs for nothing, and so does the next generation on the
// same decoder (all from graphs by then, where the first ran some forwards
// eagerly: the two need not match each other). Random weights of
// MiniCPM5-2B's shape.
//
//	go test -c -o diffusion.test ./diffusion && ./diffusion.test -test.run CUDA -test.v
func TestSamplerCUDAAhead(t *testing.T) {
	m, cfg := shapeModel(t, torch.BFloat16)
	defer m.Free()
	st := NewSettings(cfg.VocabSize-1, DefaultMaskToken, 32, true)
	prompt := make([]int64, 1100) // past 1024 keys: the cuDNN path's graphs
	for i := range prompt {
		prompt[i] = int64(i*7919) % int64(cfg.VocabSize-1)
	}
	// gen runs two generations on one sampler.
	gen := func(ahead bool, stop []int64) [2]*Result {
		t.Helper()
		s := NewSampler(m, st)
		s.noAhead = !ahead
		defer s.Close()
		o := Options{BlockSize: 32, FixedCommit: 3, MaxNewTokens: 4 * 32, ContextLimit: len(prompt) + 4*32, TopP: 1,
			StopIDs: stop}
		var res [2]*Result
		for i := range res {
			var err error
			if res[i], err = s.Generate(context.Background(), prompt, o, nil); err != nil {
				t.Fatal(err)
			}
		}
		return res
	}
	check := func(stop []int64) *Result {
		t.Helper()
		want, got := gen(false, stop), gen(true, stop)
		for i := range got {
			if !slices.Equal(got[i].IDs, want[i].IDs) || got[i].Steps != want[i].Steps ||
				got[i].FinishReason != want[i].FinishReason {
				t.Fatalf("stop %v, generation %d: queued ahead %s after %d steps, %v; not: %s after %d steps, %v",
					stop, i+1, got[i].FinishReason, got[i].Steps, got[i].IDs, want[i].FinishReason, want[i].Steps,
					want[i].IDs)
			}
		}
		t.Logf("stop %v: %d steps, %d tokens, %s", stop, got[0].Steps, len(got[0].IDs), got[0].FinishReason)
		return got[0]
	}
	res := check(nil)
	// A stop token in the third block's middle (unless it comes earlier).
	if r := check([]int64{res.IDs[2*32+10]}); r.FinishReason != "stop" {
		t.Errorf("with a stop token: finished by %s", r.FinishReason)
	}
}

// On a GPU: a sequence alone in a Batcher (slot 0: the single-stream
// decoder's path) queues its fixed-commit steps ahead as the Sampler does,
// and writes what it writes without, in bf16 (both run the same kernels:
// only the queueing differs), over two generations each.
func TestBatcherCUDAAhead(t *testing.T) {
	m, cfg := shapeModel(t, torch.BFloat16)
	defer m.Free()
	st := NewSettings(cfg.VocabSize-1, DefaultMaskToken, 32, true)
	prompt := make([]int64, 1100)
	for i := range prompt {
		prompt[i] = int64(i*7919) % int64(cfg.VocabSize-1)
	}
	o := Options{BlockSize: 32, FixedCommit: 3, MaxNewTokens: 4 * 32, ContextLimit: len(prompt) + 4*32, TopP: 1}
	gen := func(ahead bool) ([2]*Result, BatchStats) {
		t.Helper()
		b, err := NewBatcher(m, st, BatchConfig{Seqs: 2, Context: len(prompt) + 4*32})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		b.noAhead = !ahead
		var res [2]*Result
		for i := range res {
			if res[i], err = b.Generate(context.Background(), prompt, o, nil); err != nil {
				t.Fatal(err)
			}
		}
		return res, b.Stats()
	}
	want, _ := gen(false)
	got, stats := gen(true)
	for i := range got {
		if !slices.Equal(got[i].IDs, want[i].IDs) || got[i].Steps != want[i].Steps {
			t.Fatalf("generation %d: queued ahead %d steps %v; not: %d steps %v", i+1, got[i].Steps, got[i].IDs,
				want[i].Steps, want[i].IDs)
		}
	}
	t.Logf("%d of %d steps queued ahead", stats.Ahead, stats.Steps)
	if stats.Ahead == 0 {
		t.Error("no step was queued ahead")
	}
}

// On a GPU: every sequence of a batch writes what it writes alone, with
// random weights of MiniCPM5-2B's shape in float32 (in bf16 a random
// model's near-ties flip with any change of rounding, so tokens could not
// be compared; the bf16 kernels' logits are model's
// TestBatchDecoderCUDA): fixed-commit blocks, a sampled generation, AR
// decoding (blocks of 1), contexts past 1024 keys, four generations
// through three slots.
func TestBatcherCUDAMatchesSampler(t *testing.T) {
	m, cfg := shapeModel(t, torch.Float32)
	defer m.Free()
	st := NewSettings(cfg.VocabSize-1, DefaultMaskToken, 32, true)
	prompt := func(n, seed int) []int64 {
		p := make([]int64, n)
		for i := range p {
			p[i] = int64((i+seed)*7919) % int64(cfg.VocabSize-1)
		}
		return p
	}
	prompts := [][]int64{prompt(300, 1), prompt(1100, 2), prompt(50, 3), prompt(700, 4)}
	opts := []Options{
		{FixedCommit: 3, MaxNewTokens: 96, TopP: 1},
		{FixedCommit: 4, MaxNewTokens: 64, TopP: 1},
		{Temperature: 1, TopP: 0.9, Seed: 5, FixedCommit: 3, MaxNewTokens: 64},
		{BlockSize: 1, MaxNewTokens: 40, TopP: 1},
	}
	s := NewSampler(m, st)
	defer s.Close()
	want := make([]*Result, len(opts))
	for i, o := range opts {
		var err error
		if want[i], err = s.Generate(context.Background(), prompts[i], o, nil); err != nil {
			t.Fatal(err)
		}
	}
	b, err := NewBatcher(m, st, BatchConfig{Seqs: 3, Context: 1300})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := make([]*Result, len(opts))
	errs := make([]error, len(opts))
	done := make(chan int)
	for i, o := range opts {
		go func() {
			got[i], errs[i] = b.Generate(context.Background(), prompts[i], o, nil)
			done <- i
		}()
	}
	for range opts {
		<-done
	}
	for i := range opts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !slices.Equal(got[i].IDs, want[i].IDs) || got[i].Steps != want[i].Steps {
			t.Errorf("%+v: batched %d steps %v\nalone %d steps %v", opts[i], got[i].Steps, got[i].IDs, want[i].Steps, want[i].IDs)
		}
	}
	stats := b.Stats()
	t.Logf("%d sequence forwards in %d steps", stats.SeqForwards, stats.Steps)
	if stats.SeqForwards <= stats.Steps {
		t.Error("nothing ran together")
	}
}

// On a GPU: a load of sampling sequences, as the recipe's distillation
// sends the AR teacher (blocks of 1) and as sampled chat requests send a
// diffusion model (k = 3), each at its own prompt length and seed, more
// of them than slots, all finish, in
// bf16 with CUDA graphs; also while another goroutine copies to the host
// as fast as it can, as requests reading their picks do (each copy takes a
// stream of PyTorch's pool: none may be the one a graph is captured on).
func TestBatcherCUDASampledLoad(t *testing.T) {
	m, cfg := shapeModel(t, torch.BFloat16)
	defer m.Free()
	stop, copied := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { copied <- n }()
		x := torch.Zeros([]int64{4}, torch.Float32, torch.CUDA(0))
		defer x.Free()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := torch.Try(func() { torch.StartToSlice[float32](x).Wait() }); err != nil {
				t.Errorf("a copy beside the batches: %v", err)
				return
			}
			n++
		}
	}()
	defer func() {
		close(stop)
		t.Logf("%d copies to the host beside the batches", <-copied)
	}()
	for _, block := range []int{1, 32} {
		st := NewSettings(cfg.VocabSize-1, DefaultMaskToken, block, true)
		b, err := NewBatcher(m, st, BatchConfig{Seqs: 8, Context: 1024})
		if err != nil {
			t.Fatal(err)
		}
		const n, tokens = 24, 48
		errs := make(chan error, n)
		for i := range n {
			go func() {
				p := make([]int64, 60+37*i)
				for j := range p {
					p[j] = int64((j+i)*7919) % int64(cfg.VocabSize-1)
				}
				o := Options{Temperature: 0.6, TopP: []float64{1, 0.95}[i%2], Seed: uint64(i), MaxNewTokens: tokens}
				if block > 1 {
					o.FixedCommit = 3
				}
				res, err := b.Generate(context.Background(), p, o, nil)
				if err == nil && (len(res.IDs) == 0 || len(res.IDs) > tokens) {
					err = fmt.Errorf("sequence %d: %d tokens, want 1 to %d", i, len(res.IDs), tokens)
				}
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("block %d: %v", block, err)
			}
		}
		stats := b.Stats()
		t.Logf("block %d: %d sequence forwards in %d steps", block, stats.SeqForwards, stats.Steps)
		b.Close()
	}
}
