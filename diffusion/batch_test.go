package diffusion

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"dllm/torch"
)

// Every sequence of a batch writes what it writes alone, whatever runs
// beside it: eleven generations with their own block sizes, thresholds,
// commit rules, verify, sampling, lengths and stop tokens, AR decoding
// (blocks of 1), through three slots (so some wait for one and join mid-run), against a Sampler each.
func TestBatcherMatchesSampler(t *testing.T) {
	m := loadTiny(t)
	chats := loadChats(t)
	st := tinySettings(4, true)
	opts := []Options{
		{Threshold: 0.9, MaxNewTokens: 16},
		{BlockSize: 2, Threshold: 0.5, MaxNewTokens: 11},
		{Verify: true, Threshold: 0.3, MaxNewTokens: 16},
		{FixedCommit: 2, MaxNewTokens: 12},
		{Temperature: 0.8, Seed: 3, Threshold: 0.9, MaxNewTokens: 14},
		{Temperature: 1, TopP: 0.9, Seed: 5, Threshold: 0.9, MaxNewTokens: 9},
		{ErrorBudget: 0.5, MinCommit: 2, MaxNewTokens: 20},
		{Threshold: 1, MaxNewTokens: 7, StopIDs: []int64{7}},
		{BlockSize: 1, MaxNewTokens: 10}, // AR decoding
		// AR sampling: each token drawn in its step beside the others'.
		{BlockSize: 1, Temperature: 0.7, Seed: 11, MaxNewTokens: 12},
		{BlockSize: 1, Temperature: 0.7, Seed: 12, MaxNewTokens: 12},
	}
	type out struct {
		res    *Result
		blocks [][]int64
	}
	collect := func(gen func(BlockFunc) (*Result, error)) (o out, err error) {
		o.res, err = gen(func(b Block) (bool, error) { o.blocks = append(o.blocks, b.IDs); return false, nil })
		return o, err
	}
	// 1. Alone.
	s := NewSampler(m, st)
	defer s.Close()
	want := make([]out, len(opts))
	for i, o := range opts {
		var err error
		prompt := chats[i%len(chats)].IDs
		if want[i], err = collect(func(f BlockFunc) (*Result, error) { return s.Generate(context.Background(), prompt, o, f) }); err != nil {
			t.Fatal(err)
		}
	}
	// 2. Together.
	before := torch.LiveTensors()
	b, err := NewBatcher(m, st, BatchConfig{Seqs: 3, Context: 128, PrefillChunk: 8})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]out, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := chats[i%len(chats)].IDs
			got[i], errs[i] = collect(func(f BlockFunc) (*Result, error) { return b.Generate(context.Background(), prompt, o, f) })
		}()
	}
	wg.Wait()
	stats := b.Stats()
	b.Close()
	for i := range opts {
		if errs[i] != nil {
			t.Fatalf("%+v: %v", opts[i], errs[i])
		}
		g, w := got[i].res, want[i].res
		if !slices.Equal(g.IDs, w.IDs) || g.FinishReason != w.FinishReason || g.Steps != w.Steps || g.Checked != w.Checked || g.Accepted != w.Accepted {
			t.Errorf("%+v:\n batched %v %q in %d steps (%d/%d checked)\n   alone %v %q in %d steps (%d/%d checked)", opts[i],
				g.IDs, g.FinishReason, g.Steps, g.Accepted, g.Checked, w.IDs, w.FinishReason, w.Steps, w.Accepted, w.Checked)
		}
		if !slices.EqualFunc(got[i].blocks, want[i].blocks, slices.Equal) {
			t.Errorf("%+v: blocks %v, alone %v", opts[i], got[i].blocks, want[i].blocks)
		}
	}
	// The sequences did share forwards.
	if stats.SeqForwards <= stats.Steps {
		t.Errorf("%d sequence forwards in %d steps: nothing ran together", stats.SeqForwards, stats.Steps)
	}
	t.Logf("%d sequence forwards in %d steps", stats.SeqForwards, stats.Steps)
	if after := torch.LiveTensors(); after > before {
		t.Errorf("the batcher left %d tensors alive", after-before)
	}
}

// A sequence away in its caller's onBlock (a server writing to a slow
// client) does not hold the others: they step without waiting for it.
func TestBatcherDoesNotWaitForCallers(t *testing.T) {
	m := loadTiny(t)
	prompt := loadChats(t)[0].IDs
	b, err := NewBatcher(m, tinySettings(4, true), BatchConfig{Seqs: 2, Context: 128})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := b.Generate(context.Background(), prompt, Options{MaxNewTokens: 8}, func(Block) (bool, error) {
			close(held)
			<-release
			return true, nil
		})
		done <- err
	}()
	<-held
	before := b.Stats()
	res, err := b.Generate(context.Background(), prompt, Options{Threshold: 1, MaxNewTokens: 24}, func(Block) (bool, error) { return false, nil })
	if err != nil {
		t.Fatal(err)
	}
	after := b.Stats()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	steps, waits := after.Steps-before.Steps, after.GatherTimeouts-before.GatherTimeouts
	if steps < int64(res.Steps) || waits > steps/4 {
		t.Errorf("%d steps (%d of the generation's), %d of them after waiting for the held sequence", steps, res.Steps, waits)
	}
}

// A request the batch cannot run fails alone: too long for a slot, a bad
// option, a context done while waiting for a slot; a closed batcher fails
// what is left, and a cancelled sequence leaves its slot to the next.
func TestBatcherErrors(t *testing.T) {
	m := loadTiny(t)
	prompt := loadChats(t)[0].IDs
	b, err := NewBatcher(m, tinySettings(4, true), BatchConfig{Seqs: 1, Context: len(prompt) + 8})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if _, err := b.Generate(ctx, prompt, Options{MaxNewTokens: 9}, nil); !errors.Is(err, ErrContextTooLong) {
		t.Errorf("9 tokens past a prompt in a slot of 8 more: %v, want ErrContextTooLong", err)
	}
	if _, err := b.Generate(ctx, prompt, Options{Threshold: 2}, nil); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("threshold 2: %v, want ErrInvalidRequest", err)
	}
	// The slot is taken by a generation held in onBlock; another waits
	// for it until its context ends.
	hold, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := b.Generate(ctx, prompt, Options{MaxNewTokens: 8}, func(Block) (bool, error) {
			close(hold)
			<-release
			return true, nil
		})
		done <- err
	}()
	<-hold
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := b.Generate(short, prompt, Options{MaxNewTokens: 4}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting for the only slot: %v, want the deadline", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The slot is free again.
	if res, err := b.Generate(ctx, prompt, Options{MaxNewTokens: 4}, nil); err != nil || len(res.IDs) != 4 {
		t.Fatalf("after the slot came back: %v, %v", res, err)
	}
	b.Close()
	if _, err := b.Generate(ctx, prompt, Options{MaxNewTokens: 4}, nil); err == nil {
		t.Error("a closed batcher generated")
	}
	if _, err := NewBatcher(m, tinySettings(4, true), BatchConfig{Seqs: 0, Context: 64}); err == nil {
		t.Error("a batch of no sequences was made")
	}
}

// Slots go lowest first, so that a lone sequence is in slot 0 (the
// single-stream decoder's).
func TestSlotPool(t *testing.T) {
	p := newSlotPool(3)
	ctx := context.Background()
	get := func() int {
		i, err := p.get(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	if a, b, c := get(), get(), get(); a != 0 || b != 1 || c != 2 {
		t.Fatalf("slots %d, %d, %d; want 0, 1, 2", a, b, c)
	}
	p.put(2)
	p.put(0)
	if a, b := get(), get(); a != 0 || b != 2 {
		t.Errorf("after freeing 2 then 0: %d, %d; want 0, 2", a, b)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := p.get(short, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no free slot: %v, want the deadline", err)
	}
}
