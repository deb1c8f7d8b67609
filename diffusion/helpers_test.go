package diffusion

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"testing"

	"dllm/model"
	"dllm/torch"
)

const tinyDir = "../testdata/tiny-llama"

// tinyMask is an unused padding row of the tiny model (rows 500-511).
const tinyMask = 500

// loadTiny loads the random tiny Llama in float32 on the CPU.
func loadTiny(t *testing.T) *model.Model {
	t.Helper()
	if err := torch.Load(); err != nil {
		t.Fatal(err)
	}
	// The tiny model gains nothing from threads, and OpenMP threads
	// spinning on a CPU shared with other tests made them 10x slower.
	torch.SetNumThreads(1)
	m, err := model.Load(tinyDir, model.LoadOptions{Device: torch.CPU, DType: torch.Float32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	return m
}

// tinySettings is a dllm.json for the tiny model.
func tinySettings(block int, shift bool) *Settings {
	return NewSettings(tinyMask, DefaultMaskToken, block, shift)
}

// tinyChat is one chat of testdata/tiny-llama/tokenizer_expected.json.
type tinyChat struct {
	Messages       json.RawMessage `json:"messages"`
	EnableThinking bool            `json:"enable_thinking"`
	IDs            []int64         `json:"ids"`
	Greedy16       []int64         `json:"greedy16"` // transformers' greedy generate
}

func loadChats(t *testing.T) []tinyChat {
	t.Helper()
	b, err := os.ReadFile(tinyDir + "/tokenizer_expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Chat []tinyChat `json:"chat"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Chat) == 0 {
		t.Fatal("no chats in tokenizer_expected.json")
	}
	return e.Chat
}

// generate runs s.Generate and fails the test if it leaves tensors alive.
func generate(t *testing.T, ctx context.Context, s *Sampler, prompt []int64, o Options, onBlock BlockFunc) (*Result, error) {
	t.Helper()
	// A model's first decoder stacks its projections for good: not a leak.
	if d, err := s.model.NewDecoder(1, 0); err == nil {
		d.Free()
	}
	before := torch.LiveTensors()
	res, err := s.Generate(ctx, prompt, o, onBlock)
	if after := torch.LiveTensors(); after > before {
		t.Errorf("Generate left %d tensors alive", after-before)
	}
	return res, err
}

// forwardRows runs ids (one sequence) through m without a cache and
// returns the logit rows (T, V).
func forwardRows(t *testing.T, m *model.Model, ids []int64, o model.ForwardOpts) [][]float32 {
	t.Helper()
	var rows [][]float32
	torch.NoGrad(func() {
		x := torch.FromSlice(ids, 1, int64(len(ids)))
		defer x.Free()
		logits, err := m.Forward(x, o)
		if err != nil {
			t.Fatal(err)
		}
		defer logits.Free()
		V := int(logits.Size(-1))
		flat := logits.Float32s()
		for i := range ids {
			rows = append(rows, flat[i*V:(i+1)*V])
		}
	})
	return rows
}

// maskedRows is forwardRows under the bool mask allowed(query, key).
func maskedRows(t *testing.T, m *model.Model, ids []int64, allowed func(q, k int) bool) [][]float32 {
	t.Helper()
	T := len(ids)
	mask := make([]bool, T*T)
	for q := range T {
		for k := range T {
			mask[q*T+k] = allowed(q, k)
		}
	}
	mt := torch.FromSlice(mask, 1, 1, int64(T), int64(T))
	defer mt.Free()
	return forwardRows(t, m, ids, model.ForwardOpts{Mask: mt})
}

// argmax is the first index of the largest value and its softmax
// probability, leaving out id skip (-1 for none) as the sampler leaves out
// the mask.
func argmax(row []float32, skip int64) (int64, float64) {
	best := -1
	var z float64
	for i, v := range row {
		if int64(i) != skip && (best < 0 || v > row[best]) {
			best = i
		}
	}
	for i, v := range row {
		if int64(i) != skip {
			z += math.Exp(float64(v - row[best]))
		}
	}
	return int64(best), 1 / z
}

// greedyLoop is plain causal greedy decoding: the whole sequence through
// the model for every token, no cache.
func greedyLoop(t *testing.T, m *model.Model, prompt []int64, n int) []int64 {
	t.Helper()
	seq := append([]int64{}, prompt...)
	for range n {
		rows := forwardRows(t, m, seq, model.ForwardOpts{Attention: model.Attention{Kind: model.Causal}})
		tok, _ := argmax(rows[len(rows)-1], -1)
		seq = append(seq, tok)
	}
	return seq[len(prompt):]
}
