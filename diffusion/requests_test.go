package diffusion

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

// Stop tokens, onBlock's stop, the length limit and the context limit end
// a generation where they should, with the right finish reason.
func TestFinishing(t *testing.T) {
	m := loadTiny(t)
	s := NewSampler(m, tinySettings(4, true))
	prompt := loadChats(t)[0].IDs
	base := Options{Threshold: 0.9, MaxNewTokens: 16}
	ref, err := generate(t, context.Background(), s, prompt, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := ref.IDs
	// A stop token cuts the output at its first occurrence.
	stopAt := slices.Index(out, out[6])
	with := func(edit func(*Options)) Options {
		o := base
		edit(&o)
		return o
	}
	cases := []struct {
		name   string
		o      Options
		halt   int // onBlock returns stop on this call (1-based); 0 never
		want   []int64
		finish string
		blocks []int // tokens handed to onBlock, block by block
	}{
		{"no stop", base, 0, out, "length", []int{4, 4, 4, 4}},
		{"stop token", with(func(o *Options) { o.StopIDs = []int64{999, out[6]} }), 0, out[:stopAt], "stop", nil},
		{"stop first", with(func(o *Options) { o.StopIDs = []int64{out[0]} }), 0, []int64{}, "stop", []int{0}},
		{"onBlock stop", base, 2, out[:8], "stop", []int{4, 4}},
		{"length cut", with(func(o *Options) { o.MaxNewTokens = 6 }), 0, out[:6], "length", []int{4, 2}},
		{"context cut", with(func(o *Options) { o.ContextLimit = len(prompt) + 7 }), 0, nil, "length", []int{4, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var blocks []int
			var streamed []int64
			res, err := generate(t, context.Background(), s, prompt, c.o, func(b Block) (bool, error) {
				blocks = append(blocks, len(b.IDs))
				streamed = append(streamed, b.IDs...)
				return len(blocks) == c.halt, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if c.want != nil && !slices.Equal(res.IDs, c.want) {
				t.Errorf("ids %v, want %v", res.IDs, c.want)
			}
			if res.FinishReason != c.finish {
				t.Errorf("finish %q, want %q", res.FinishReason, c.finish)
			}
			if c.blocks != nil && !slices.Equal(blocks, c.blocks) {
				t.Errorf("blocks of %v tokens, want %v", blocks, c.blocks)
			}
			if !slices.Equal(streamed, res.IDs) {
				t.Errorf("streamed %v, result %v", streamed, res.IDs)
			}
		})
	}
}

// Sampling is reproducible under a seed and depends on it.
func TestSeededSampling(t *testing.T) {
	m := loadTiny(t)
	s := NewSampler(m, tinySettings(4, true))
	prompt := loadChats(t)[1].IDs
	for _, topP := range []float64{0.9, 1} {
		o := Options{Temperature: 1, TopP: topP, Threshold: 0.9, MaxNewTokens: 12}
		run := func(seed uint64) []int64 {
			o.Seed = seed
			res, err := generate(t, context.Background(), s, prompt, o, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range res.IDs {
				if id == tinyMask {
					t.Fatalf("top_p %v: sampled the mask", topP)
				}
			}
			return res.IDs
		}
		first := run(7)
		if again := run(7); !slices.Equal(again, first) {
			t.Errorf("top_p %v: seed 7 gave %v, then %v", topP, first, again)
		}
		differs := false
		for seed := uint64(1); seed <= 3 && !differs; seed++ {
			differs = !slices.Equal(run(seed), first)
		}
		if !differs {
			t.Errorf("top_p %v: seeds 1-3 all gave seed 7's %v", topP, first)
		}
	}
}

func TestBadRequests(t *testing.T) {
	m := loadTiny(t)
	s := NewSampler(m, tinySettings(4, true))
	prompt := loadChats(t)[0].IDs
	cases := []struct {
		name   string
		s      *Sampler
		prompt []int64
		o      Options
		want   error
	}{
		{"prompt fills context", s, prompt, Options{ContextLimit: len(prompt)}, ErrContextTooLong},
		{"prompt over context", s, prompt, Options{ContextLimit: 10}, ErrContextTooLong},
		{"prompt over max positions", s, make([]int64, m.Config.MaxPositionEmbeddings), Options{}, ErrContextTooLong},
		{"empty prompt", s, nil, Options{}, ErrInvalidRequest},
		{"token outside vocab", s, []int64{1, 512}, Options{}, ErrInvalidRequest},
		{"negative token", s, []int64{-1}, Options{}, ErrInvalidRequest},
		{"negative block", s, prompt, Options{BlockSize: -1}, ErrInvalidRequest},
		{"threshold above 1", s, prompt, Options{Threshold: 1.5}, ErrInvalidRequest},
		{"threshold NaN", s, prompt, Options{Threshold: math.NaN()}, ErrInvalidRequest},
		{"negative temperature", s, prompt, Options{Temperature: -1}, ErrInvalidRequest},
		{"infinite temperature", s, prompt, Options{Temperature: math.Inf(1)}, ErrInvalidRequest},
		{"top_p above 1", s, prompt, Options{TopP: 2}, ErrInvalidRequest},
		{"negative steps", s, prompt, Options{MaxStepsPerBlock: -2}, ErrInvalidRequest},
		{"negative fixed commit", s, prompt, Options{FixedCommit: -1}, ErrInvalidRequest},
		{"negative max tokens", s, prompt, Options{MaxNewTokens: -5}, ErrInvalidRequest},
		{"negative context", s, prompt, Options{ContextLimit: -5}, ErrInvalidRequest},
		{"AR model, block 4", NewSampler(m, ARSettings()), prompt, Options{BlockSize: 4}, ErrInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := generate(t, context.Background(), c.s, c.prompt, c.o, nil)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}
}

// A client that hangs up stops its generation before the next step.
func TestCancel(t *testing.T) {
	m := loadTiny(t)
	s := NewSampler(m, tinySettings(4, true))
	prompt := loadChats(t)[0].IDs
	o := Options{Threshold: 1, MaxNewTokens: 400}

	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	start := time.Now()
	_, err := generate(t, ctx, s, prompt, o, func(Block) (bool, error) {
		calls++
		cancel()
		return false, nil
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("cancelled in onBlock: error %v after %d blocks, want context.Canceled after 1", err, calls)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("cancelled generation took %v", el)
	}

	if _, err := generate(t, ctx, s, prompt, o, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: error %v", err)
	}

	boom := errors.New("client gone")
	_, err = generate(t, context.Background(), s, prompt, o, func(Block) (bool, error) { return false, boom })
	if !errors.Is(err, boom) {
		t.Errorf("onBlock error: got %v", err)
	}
}
