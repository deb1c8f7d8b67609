package diffusion

import (
	"context"
	"errors"
	"slices"
	"testing"

	"dllm/torch"
)

// Verify decoding writes what greedy AR decoding of the same weights
// writes (here transformers' greedy generate), whatever the block size,
// threshold and commit cap of its drafts; and it drafts in blocks: some of
// the checked tokens stand.
func TestVerifyIsGreedyDecoding(t *testing.T) {
	m := loadTiny(t)
	chats := loadChats(t)
	checked, agreed := 0, 0
	for _, block := range []int{2, 4, 8} {
		s := NewSampler(m, tinySettings(block, true))
		for _, o := range []Options{{Threshold: 0.05}, {Threshold: 0.9}, {Threshold: 1}, {Threshold: 0.05, MaxCommit: 2}, {ErrorBudget: 0.5, MinCommit: 2}} {
			for i, chat := range chats {
				o.Verify, o.MaxNewTokens = true, len(chat.Greedy16)
				res, err := generate(t, context.Background(), s, chat.IDs, o, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.IDs, chat.Greedy16) {
					t.Errorf("block %d, %+v, chat %d:\n got %v\nwant %v", block, o, i, res.IDs, chat.Greedy16)
				}
				if res.Accepted > res.Checked || res.Steps < 1 {
					t.Errorf("block %d, chat %d: %d of %d checked tokens accepted in %d steps", block, i, res.Accepted, res.Checked, res.Steps)
				}
				checked += res.Checked
				agreed += res.Accepted
			}
		}
	}
	if checked == 0 || agreed == 0 {
		t.Errorf("%d of %d checked tokens accepted: the checks never ran or never kept a draft", agreed, checked)
	}
	t.Logf("%d of %d checked tokens accepted", agreed, checked)
}

// A verified generation ends where greedy AR decoding does: at a stop
// token, the length limit, the context limit or onBlock's stop, and
// streams what it outputs.
func TestVerifyFinishing(t *testing.T) {
	m := loadTiny(t)
	prompt := loadChats(t)[0].IDs
	ar := NewSampler(m, tinySettings(1, true))
	s := NewSampler(m, tinySettings(4, true))
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"length", Options{MaxNewTokens: 23}},
		{"stop token", Options{MaxNewTokens: 30, StopIDs: nil}}, // set below from the output
		{"context", Options{MaxNewTokens: 40, ContextLimit: len(prompt) + 13}},
		{"one token", Options{MaxNewTokens: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			ref, err := generate(t, context.Background(), ar, prompt, o, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "stop token" {
				o.StopIDs = []int64{ref.IDs[9]}
				if ref, err = generate(t, context.Background(), ar, prompt, o, nil); err != nil {
					t.Fatal(err)
				}
			}
			o.Verify, o.Threshold = true, 0.05
			var streamed []int64
			res, err := generate(t, context.Background(), s, prompt, o, func(b Block) (bool, error) {
				streamed = append(streamed, b.IDs...)
				return false, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.IDs, ref.IDs) || res.FinishReason != ref.FinishReason {
				t.Errorf("%v (%s), want %v (%s)", res.IDs, res.FinishReason, ref.IDs, ref.FinishReason)
			}
			if !slices.Equal(streamed, res.IDs) {
				t.Errorf("streamed %v, result %v", streamed, res.IDs)
			}
		})
	}
	// onBlock's stop ends it after that block.
	n := 0
	res, err := generate(t, context.Background(), s, prompt, Options{MaxNewTokens: 30, Verify: true, Threshold: 0.05}, func(b Block) (bool, error) {
		n++
		return n == 2, nil
	})
	if err != nil || res.FinishReason != "stop" || n != 2 {
		t.Errorf("onBlock stop: %v, finish %q after %d blocks", err, res.FinishReason, n)
	}
}

// Verify is refused where it cannot hold: sampling, fixed commits, a model
// without the shift.
func TestVerifyRefused(t *testing.T) {
	m := loadTiny(t)
	prompt := loadChats(t)[0].IDs
	for _, c := range []struct {
		name  string
		shift bool
		o     Options
	}{
		{"sampling", true, Options{Verify: true, Temperature: 0.7}},
		{"fixed commit", true, Options{Verify: true, FixedCommit: 2}},
		{"no shift", false, Options{Verify: true}},
		{"negative cap", true, Options{MaxCommit: -1}},
		{"min above max", true, Options{MinCommit: 3, MaxCommit: 2}},
		{"negative budget", true, Options{ErrorBudget: -0.1}},
	} {
		s := NewSampler(m, tinySettings(4, c.shift))
		c.o.MaxNewTokens = 4
		if _, err := s.Generate(context.Background(), prompt, c.o, nil); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", c.name, err)
		}
	}
}

// countEngine is an engine that only counts commits: enough for check.
type countEngine struct{ engine }

func (countEngine) commit(int64) error { return nil }

// A draft's check sets the reach of the next: the length that stood after
// a rejection, one more after a draft of two or more that stood whole,
// unchanged after a one-token draft; never past the block.
func TestVerifyReach(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Fatal(err)
	}
	logits := torch.FromSlice(make([]float32, 8*3), 8, 3) // rows for up to 8 drafted tokens
	defer logits.Free()
	g := &generation{p: plan{block: 4}, eng: countEngine{}, reach: 4}
	defer g.carry.free()
	steps := []struct {
		draft, picks []int64 // picks[i] is the AR prediction of draft[i+1]
		keep, reach  int
	}{
		{[]int64{5, 6, 7, 8}, []int64{6, 7, 8}, 4, 4}, // whole, at the block already
		{[]int64{5, 6, 7, 8}, []int64{6, 9, 8}, 2, 2}, // 7 is wrong: 2 stood
		{[]int64{5}, nil, 1, 2},                       // one token proves nothing
		{[]int64{5, 6}, []int64{6}, 2, 3},             // whole: one longer
		{[]int64{5, 6, 7}, []int64{1, 7}, 1, 1},       // wrong at once
	}
	for i, s := range steps {
		keep, err := g.check(s.draft, s.picks, logitRows{t: logits})
		if err != nil {
			t.Fatal(err)
		}
		if keep != s.keep || g.reach != s.reach {
			t.Errorf("step %d: kept %d, reach %d; want %d, %d", i, keep, g.reach, s.keep, s.reach)
		}
	}
}
