package diffusion

import (
	"math"
	"slices"
	"testing"

	"dllm/model"
	"dllm/torch"
)

func TestCanvasCommit(t *testing.T) {
	const M = 99 // mask
	tok := []int64{10, 11, 12, 13}
	th := func(x float64) commitRule { return commitRule{threshold: x} }
	cases := []struct {
		name  string
		fixed []bool
		conf  []float64
		rule  commitRule
		all   bool
		want  []int64
	}{
		{"above threshold", []bool{false, false, false, false}, []float64{0.95, 0.5, 0.9, 0.2}, th(0.9), false, []int64{10, M, 12, M}},
		{"none above: most confident", []bool{false, false, false, false}, []float64{0.3, 0.5, 0.1, 0.5}, th(0.9), false, []int64{M, 11, M, M}},
		{"fixed positions ignored", []bool{false, true, false, false}, []float64{0.3, 0.99, 0.1, 0.2}, th(0.9), false, []int64{10, 1, M, M}},
		{"last step commits all", []bool{false, true, false, false}, []float64{0.3, 0.99, 0.1, 0.2}, th(0.9), true, []int64{10, 1, 12, 13}},
		{"threshold 1: one per step", []bool{false, false, false, false}, []float64{0.3, 0.4, 0.8, 0.7}, th(1), false, []int64{M, M, 12, M}},
		{"max: the most confident", []bool{false, false, false, false}, []float64{0.95, 0.99, 0.9, 0.97}, commitRule{threshold: 0.9, max: 2}, false, []int64{M, 11, M, 13}},
		{"max: ties in position order", []bool{false, false, false, false}, []float64{0.95, 0.95, 0.95, 0.2}, commitRule{threshold: 0.9, max: 2}, false, []int64{10, 11, M, M}},
		{"max above the count", []bool{false, false, false, false}, []float64{0.95, 0.5, 0.9, 0.2}, commitRule{threshold: 0.9, max: 3}, false, []int64{10, M, 12, M}},
		{"max: the last step still commits all", []bool{false, false, false, false}, []float64{0.3, 0.99, 0.1, 0.2}, commitRule{threshold: 0.9, max: 1}, true, []int64{10, 11, 12, 13}},
		{"min: the most confident below the threshold too", []bool{false, false, false, false}, []float64{0.95, 0.5, 0.6, 0.2}, commitRule{threshold: 0.9, min: 3}, false, []int64{10, 11, 12, M}},
		{"min above what is left", []bool{false, true, true, false}, []float64{0.1, 0.9, 0.9, 0.2}, commitRule{threshold: 0.9, min: 3}, false, []int64{10, 1, 1, 13}},
		// 1-p: 0.01, 0.05, 0.1, 0.4: 0.01+0.05 <= 0.1 < 0.16.
		{"error budget", []bool{false, false, false, false}, []float64{0.9, 0.99, 0.6, 0.95}, commitRule{budget: 0.1}, false, []int64{M, 11, M, 13}},
		{"error budget: all sure", []bool{false, false, false, false}, []float64{0.99, 0.99, 0.99, 0.99}, commitRule{budget: 0.1}, false, []int64{10, 11, 12, 13}},
		{"error budget: one at least", []bool{false, false, false, false}, []float64{0.3, 0.5, 0.1, 0.5}, commitRule{budget: 0.1}, false, []int64{M, 11, M, M}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cv := newCanvas(4, M)
			for i, f := range c.fixed {
				if f {
					cv.ids[i], cv.fixed[i] = 1, true
				}
			}
			cv.commit(tok, c.conf, c.rule, c.all)
			if !slices.Equal(cv.ids, c.want) {
				t.Fatalf("ids %v, want %v", cv.ids, c.want)
			}
		})
	}
}

func TestCanvasCommitTop(t *testing.T) {
	const M = 99 // mask
	tok := []int64{10, 11, 12, 13, 14}
	cases := []struct {
		name  string
		fixed []bool
		conf  []float64
		k     int
		first bool // position 0 goes first (the shift)
		all   bool
		want  []int64
	}{
		{"one", []bool{false, false, false, false, false}, []float64{0.1, 0.5, 0.3, 0.9, 0.2}, 1, false, false, []int64{M, M, M, 13, M}},
		{"two, confidence ignored above any threshold", []bool{false, false, false, false, false}, []float64{0.99, 0.98, 0.97, 0.99, 0.1}, 2, false, false, []int64{10, M, M, 13, M}},
		{"ties go to the first", []bool{false, false, false, false, false}, []float64{0.5, 0.5, 0.5, 0.5, 0.5}, 3, false, false, []int64{10, 11, 12, M, M}},
		{"fixed positions skipped", []bool{false, true, false, true, false}, []float64{0.1, 0.99, 0.3, 0.99, 0.2}, 2, false, false, []int64{M, 1, 12, 1, 14}},
		{"fewer left than k", []bool{true, true, false, true, true}, []float64{0, 0, 0.1, 0, 0}, 4, false, false, []int64{1, 1, 12, 1, 1}},
		{"shift: position 0 first", []bool{false, false, false, false, false}, []float64{0.01, 0.5, 0.3, 0.9, 0.2}, 2, true, false, []int64{10, M, M, 13, M}},
		{"shift, position 0 fixed", []bool{true, false, false, false, false}, []float64{0.9, 0.5, 0.3, 0.9, 0.2}, 1, true, false, []int64{1, M, M, 13, M}},
		{"last step commits all", []bool{false, true, false, false, false}, []float64{0.1, 0.99, 0.3, 0.4, 0.2}, 1, false, true, []int64{10, 1, 12, 13, 14}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cv := newCanvas(len(tok), M)
			for i, f := range c.fixed {
				if f {
					cv.ids[i], cv.fixed[i] = 1, true
				}
			}
			cv.commitTop(tok, c.conf, c.k, c.first, c.all)
			if !slices.Equal(cv.ids, c.want) {
				t.Fatalf("ids %v, want %v", cv.ids, c.want)
			}
		})
	}
}

func TestCanvasSettled(t *testing.T) {
	const M = 99
	stop := map[int64]bool{7: true}
	cases := []struct {
		name    string
		ids     []int64 // M = masked
		need    int
		keep    int
		stopped bool
		done    bool
	}{
		{"all masked", []int64{M, M, M, M}, 4, 0, false, false},
		{"full", []int64{1, 2, 3, 4}, 4, 4, false, true},
		{"gap", []int64{1, M, 3, 4}, 4, 0, false, false},
		{"stop after fixed prefix", []int64{1, 7, M, M}, 4, 1, true, true},
		{"stop behind a mask", []int64{1, M, 7, M}, 4, 0, false, false},
		{"stop first", []int64{7, M, M, M}, 4, 0, true, true},
		{"length cut", []int64{1, 2, M, M}, 2, 2, false, true},
		{"stop past the cut", []int64{1, 2, 7, M}, 2, 2, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cv := newCanvas(len(c.ids), M)
			for i, id := range c.ids {
				if id != M {
					cv.ids[i], cv.fixed[i] = id, true
				}
			}
			keep, stopped, done := cv.settled(c.need, stop)
			if keep != c.keep || stopped != c.stopped || done != c.done {
				t.Fatalf("settled = (%d, %v, %v), want (%d, %v, %v)", keep, stopped, done, c.keep, c.stopped, c.done)
			}
		})
	}
}

// The picker on hand-made logits: greedy takes the argmax (never the mask)
// with its softmax probability; the nucleus keeps the fewest top tokens
// whose mass reaches top_p and renormalises over them, with the first row
// given apart or not.
func TestPicker(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Fatal(err)
	}
	const mask = 5
	probs := []float64{0.4, 0.3, 0.2, 0.1, 0, 0} // index 5, the mask, gets the largest logit
	logits := make([]float32, len(probs))
	for i, p := range probs {
		logits[i] = float32(math.Log(p))
	}
	logits[mask] = 10
	cases := []struct {
		name        string
		temperature float64
		topP        float64
		allowed     map[int64]float64 // candidate -> its probability
	}{
		{"greedy", 0, 1, map[int64]float64{0: 0.4}},
		{"tiny nucleus", 1, 0.1, map[int64]float64{0: 1}},
		{"two-token nucleus", 1, 0.5, map[int64]float64{0: 0.4 / 0.7, 1: 0.3 / 0.7}},
		{"no nucleus", 1, 1, map[int64]float64{0: 0.4, 1: 0.3, 2: 0.2, 3: 0.1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			torch.NoGrad(func() {
				pk := newPicker(plan{mask: mask, temperature: c.temperature, topP: c.topP}, torch.CPU)
				defer pk.free()
				x := torch.FromSlice(append(append([]float32{}, logits...), logits...), 2, int64(len(probs)))
				defer x.Free()
				// Odd seeds give the first row apart, as the sampler's carry.
				first, rest := x.Narrow(0, 0, 1), x.Narrow(0, 1, 1)
				defer torch.Free(first, rest)
				seen := map[int64]bool{}
				for seed := range uint64(40) {
					torch.ManualSeed(seed)
					var tok []int64
					var conf []float64
					if seed%2 == 1 {
						tok, conf = pk.pick(&logitRows{t: first}, logitRows{t: rest})
					} else {
						tok, conf = pk.pick(nil, logitRows{t: x})
					}
					if len(tok) != 2 {
						t.Fatalf("%d candidates for 2 rows", len(tok))
					}
					for i := range tok {
						want, ok := c.allowed[tok[i]]
						if !ok || math.Abs(conf[i]-want) > 1e-5 {
							t.Fatalf("row %d: picked %d with probability %v; allowed %v", i, tok[i], conf[i], c.allowed)
						}
						seen[tok[i]] = true
					}
				}
				if len(seen) != len(c.allowed) {
					t.Errorf("40 draws saw %v of %v", seen, c.allowed)
				}
			})
		})
	}
}

// resolve fills defaults from dllm.json and sizes the KV cache.
func TestResolve(t *testing.T) {
	m := &model.Model{Config: &model.Config{VocabSize: 512, MaxPositionEmbeddings: 64}}
	st := tinySettings(4, true)
	st.Generation.MaxStepsPerBlock = 3
	prompt := make([]int64, 10)
	cases := []struct {
		name string
		o    Options
		want plan // the fields compared below
	}{
		{"defaults", Options{MaxNewTokens: 6}, plan{block: 4, maxSteps: 3, threshold: 0.9, topP: 1, maxNew: 6, cacheLen: 18}},
		{"other block size: no step cap", Options{BlockSize: 8, MaxNewTokens: 6}, plan{block: 8, maxSteps: 8, threshold: 0.9, topP: 1, maxNew: 6, cacheLen: 18}},
		{"no max: the context", Options{}, plan{block: 4, maxSteps: 3, threshold: 0.9, topP: 1, maxNew: 54, cacheLen: 64}},
		{"context cuts the last block", Options{MaxNewTokens: 6, ContextLimit: 15}, plan{block: 4, maxSteps: 3, threshold: 0.9, topP: 1, maxNew: 5, cacheLen: 15}},
		{"huge block", Options{BlockSize: 1 << 62, MaxNewTokens: 6}, plan{block: 1 << 62, maxSteps: 1 << 62, threshold: 0.9, topP: 1, maxNew: 6, cacheLen: 64}},
		{"tiny temperature is greedy", Options{Temperature: 1e-9, TopP: 0.5, MaxNewTokens: 4}, plan{block: 4, maxSteps: 3, threshold: 0.9, topP: 0.5, maxNew: 4, cacheLen: 14}},
		{"sampling", Options{Temperature: 0.7, Threshold: 0.5, MaxNewTokens: 4}, plan{block: 4, maxSteps: 3, threshold: 0.5, temperature: 0.7, topP: 1, maxNew: 4, cacheLen: 14}},
		{"fixed commit: no step cap", Options{FixedCommit: 2, MaxNewTokens: 4}, plan{block: 4, fixed: 2, maxSteps: 4, threshold: 0.9, topP: 1, maxNew: 4, cacheLen: 14}},
		{"fixed commit, cap given", Options{FixedCommit: 1, MaxStepsPerBlock: 2, MaxNewTokens: 4}, plan{block: 4, fixed: 1, maxSteps: 2, threshold: 0.9, topP: 1, maxNew: 4, cacheLen: 14}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := resolve(m, st, prompt, c.o)
			if err != nil {
				t.Fatal(err)
			}
			w := c.want
			if p.block != w.block || p.fixed != w.fixed || p.maxSteps != w.maxSteps || p.threshold != w.threshold || p.temperature != w.temperature ||
				p.topP != w.topP || p.maxNew != w.maxNew || p.cacheLen != w.cacheLen || p.mask != tinyMask || !p.shift {
				t.Fatalf("plan %+v\nwant %+v", p, w)
			}
		})
	}
}

// commit reports how many positions its rule accepted on its own (0 when
// only the bounds committed anything: a stalled step), and prefix how many
// leading positions are fixed.
func TestCanvasCommitAcceptedAndPrefix(t *testing.T) {
	const M = 99
	tok := []int64{10, 11, 12, 13}
	cases := []struct {
		conf     []float64
		rule     commitRule
		accepted int
		prefix   int
	}{
		{[]float64{0.95, 0.99, 0.5, 0.2}, commitRule{threshold: 0.9}, 2, 2},
		{[]float64{0.5, 0.6, 0.95, 0.2}, commitRule{threshold: 0.9}, 1, 0},
		{[]float64{0.5, 0.6, 0.7, 0.2}, commitRule{threshold: 0.9}, 0, 0},             // stalled: the most confident (2) alone
		{[]float64{0.8, 0.6, 0.7, 0.2}, commitRule{threshold: 0.9, min: 2}, 0, 1},     // stalled: the floor's two (0 and 2)
		{[]float64{0.99, 0.99, 0.99, 0.99}, commitRule{threshold: 0.9, max: 1}, 4, 1}, // accepted beyond the cap
		{[]float64{0.99, 0.8, 0.99, 0.99}, commitRule{budget: 0.05}, 3, 1},            // 0.01 x 3 within 0.05
	}
	for i, c := range cases {
		cv := newCanvas(4, M)
		if got := cv.commit(tok, c.conf, c.rule, false); got != c.accepted {
			t.Errorf("case %d: accepted %d, want %d", i, got, c.accepted)
		}
		if got := cv.prefix(); got != c.prefix {
			t.Errorf("case %d: prefix %d, want %d (ids %v)", i, got, c.prefix, cv.ids)
		}
	}
}
