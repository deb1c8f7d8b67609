package model

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"dllm/torch"
)

const tinyDir = "../testdata/tiny-llama"

type tinyExpected struct {
	InputIDs            []int64     `json:"input_ids"`
	CausalLogits        [][]float64 `json:"causal_logits"`
	BidirectionalLogits [][]float64 `json:"bidirectional_logits"`
}

func loadTiny(t *testing.T) (*Model, tinyExpected) {
	t.Helper()
	if err := torch.Load(); err != nil {
		t.Fatal(err)
	}
	m, err := Load(tinyDir, LoadOptions{Device: torch.CPU, DType: torch.Float32})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tinyDir + "/expected_logits.json")
	if err != nil {
		t.Fatal(err)
	}
	var e tinyExpected
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return m, e
}

// rows reshapes logits (1, T, V) into T rows.
func rows(t *testing.T, logits *torch.Tensor) [][]float64 {
	t.Helper()
	s := logits.Shape()
	flat := torch.ToSlice[float64](logits)
	out := make([][]float64, s[1])
	for i := range out {
		out[i] = flat[int64(i)*s[2] : int64(i+1)*s[2]]
	}
	return out
}

// rowRelErr is max over rows of ||got-want|| / ||want||.
func rowRelErr(got, want [][]float64) float64 {
	worst := 0.0
	for i := range want {
		var num, den float64
		for j := range want[i] {
			d := got[i][j] - want[i][j]
			num += d * d
			den += want[i][j] * want[i][j]
		}
		worst = math.Max(worst, math.Sqrt(num/den))
	}
	return worst
}

func forward(t *testing.T, m *Model, ids []int64, o ForwardOpts) [][]float64 {
	t.Helper()
	logits, err := m.Forward(torch.FromSlice(ids, 1, int64(len(ids))), o)
	if err != nil {
		t.Fatal(err)
	}
	defer logits.Free()
	return rows(t, logits)
}

func TestTinyLlamaMatchesTransformers(t *testing.T) {
	m, e := loadTiny(t)
	defer m.Free()
	cases := []struct {
		name string
		att  Attention
		want [][]float64
	}{
		{"causal", Attention{Kind: Causal}, e.CausalLogits},
		{"bidirectional", Attention{Kind: Bidirectional}, e.BidirectionalLogits},
		// Degenerate block sizes are the two reference patterns.
		{"block:1", Attention{Kind: BlockCausal, Block: 1}, e.CausalLogits},
		{"block:16", Attention{Kind: BlockCausal, Block: 16}, e.BidirectionalLogits},
		{"block:64", Attention{Kind: BlockCausal, Block: 64}, e.BidirectionalLogits},
	}
	for _, c := range cases {
		got := forward(t, m, e.InputIDs, ForwardOpts{Attention: c.att})
		if r := rowRelErr(got, c.want); r > 1e-4 {
			t.Errorf("%s: relative error %.2e against transformers", c.name, r)
		}
	}
}

func TestBlockCausalFirstBlockIsBidirectional(t *testing.T) {
	m, e := loadTiny(t)
	defer m.Free()
	got := forward(t, m, e.InputIDs, ForwardOpts{Attention: Attention{Kind: BlockCausal, Block: 4}})
	// The first block sees only itself, fully: a bidirectional pass over it.
	first := forward(t, m, e.InputIDs[:4], ForwardOpts{Attention: Attention{Kind: Bidirectional}})
	if d := rowRelErr(got[:4], first); d > 1e-5 {
		t.Errorf("first block differs from a bidirectional pass over it: %.2e", d)
	}
	// Later rows are neither causal nor bidirectional.
	if d := rowRelErr(got[8:9], e.CausalLogits[8:9]); d < 1e-3 {
		t.Error("row 8 of block:4 looks causal")
	}
	if d := rowRelErr(got[8:9], e.BidirectionalLogits[8:9]); d < 1e-3 {
		t.Error("row 8 of block:4 looks bidirectional")
	}
}

func TestKVCacheDecodeEqualsSinglePass(t *testing.T) {
	m, e := loadTiny(t)
	defer m.Free()
	for _, bs := range []int{1, 4, 5} {
		att := Attention{Kind: BlockCausal, Block: bs}
		want := forward(t, m, e.InputIDs, ForwardOpts{Attention: att})
		cache, err := m.NewCache(1, 32)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]float64
		for start := 0; start < len(e.InputIDs); start += bs {
			end := min(start+bs, len(e.InputIDs))
			got = append(got, forward(t, m, e.InputIDs[start:end], ForwardOpts{Attention: att, Cache: cache})...)
			if err := cache.Commit(int64(end - start)); err != nil {
				t.Fatal(err)
			}
		}
		if r := rowRelErr(got, want); r > 1e-5 {
			t.Errorf("block %d: cached decode differs from single pass by %.2e", bs, r)
		}
		cache.Free()
	}
}

func TestKVCacheRewriteAndCrop(t *testing.T) {
	m, e := loadTiny(t)
	defer m.Free()
	att := Attention{Kind: BlockCausal, Block: 4}
	want := forward(t, m, e.InputIDs[:8], ForwardOpts{Attention: att})
	cache, _ := m.NewCache(1, 16)
	defer cache.Free()
	forward(t, m, e.InputIDs[:4], ForwardOpts{Attention: att, Cache: cache})
	cache.Commit(4)
	// A block run twice (as a diffusion step repeats) overwrites its slots.
	forward(t, m, []int64{9, 9, 9, 9}, ForwardOpts{Attention: att, Cache: cache})
	got := forward(t, m, e.InputIDs[4:8], ForwardOpts{Attention: att, Cache: cache})
	if r := rowRelErr(got, want[4:8]); r > 1e-5 {
		t.Errorf("rewritten block differs by %.2e", r)
	}
	cache.Commit(4)
	if err := cache.Crop(4); err != nil || cache.Len != 4 {
		t.Fatalf("crop: %v, len %d", err, cache.Len)
	}
	got = forward(t, m, e.InputIDs[4:8], ForwardOpts{Attention: att, Cache: cache})
	if r := rowRelErr(got, want[4:8]); r > 1e-5 {
		t.Errorf("after crop the block differs by %.2e", r)
	}
	if err := cache.Crop(9); err == nil {
		t.Error("crop past the length should fail")
	}
	if err := cache.Commit(20); err == nil {
		t.Error("commit past the end should fail")
	}
	if _, err := m.Forward(torch.FromSlice(make([]int64, 13), 1, 13), ForwardOpts{Cache: cache}); err == nil {
		t.Error("forward past the cache should fail")
	}
}

func TestLastNAndErrors(t *testing.T) {
	m, e := loadTiny(t)
	defer m.Free()
	logits, err := m.Forward(torch.FromSlice(e.InputIDs, 1, 16), ForwardOpts{LastN: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r := rowRelErr(rows(t, logits), e.CausalLogits[14:]); r > 1e-4 {
		t.Errorf("LastN rows differ by %.2e", r)
	}
	if _, err := m.Forward(torch.FromSlice([]int64{1, 2, 3}), ForwardOpts{}); err == nil {
		t.Error("1-d ids should be an error")
	}
	if _, err := m.Forward(torch.FromSlice([]int64{1, 900}, 1, 2), ForwardOpts{}); err == nil || !torch.IsError(err) {
		t.Errorf("out-of-vocab id should be a torch error, got %v", err)
	}
	if _, err := Load("../testdata/nope", LoadOptions{}); err == nil {
		t.Error("missing dir should fail")
	}
}

func TestParseAttention(t *testing.T) {
	for _, s := range []string{"causal", "bidirectional", "block:32"} {
		a, err := ParseAttention(s)
		if err != nil || a.String() != s {
			t.Errorf("ParseAttention(%q) = %v, %v", s, a, err)
		}
	}
	for _, s := range []string{"", "block:0", "block:x", "full"} {
		if _, err := ParseAttention(s); err == nil {
			t.Errorf("ParseAttention(%q) should fail", s)
		}
	}
}

func TestNewRandomShape(t *testing.T) {
	cfg, err := LoadConfig(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewRandom(cfg, LoadOptions{DType: torch.Float32}, 1, 0.02)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	var n int64
	for _, p := range m.Params() {
		n += p.Numel()
	}
	if n != cfg.NumParams() {
		t.Fatalf("random model has %d parameters, config says %d", n, cfg.NumParams())
	}
}
