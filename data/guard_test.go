package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEvalSetReason(t *testing.T) {
	cases := []struct {
		path string
		want string // a fragment of the reason; "" = allowed
	}{
		{"data/Idavidrein/gpqa/gpqa_diamond.csv", "GPQA"},
		{"data/HuggingFaceH4/MATH-500/test.jsonl", "MATH-500"},
		{"data/math_500.jsonl", "MATH-500"},
		{"data/livecodebench/code_generation_lite/test6.jsonl", "LiveCodeBench"},
		{"data/TIGER-Lab/MMLU-Pro/data/validation-00000-of-00001.parquet", "MMLU-Pro"},
		{"data/mmlu_pro.parquet", "MMLU-Pro"},
		// Evaluation splits of anything, as Hugging Face lays them out.
		{"data/AI-MO/NuminaMath-CoT/data/test-00000-of-00001.parquet", "evaluation split"},
		{"data/cais/mmlu/all/dev-00000-of-00001.parquet", "evaluation split"},
		{"data/gsm8k/main/test.jsonl.gz", "evaluation split"},
		{"data/x/validation.jsonl", "evaluation split"},
		{"out/proxy/synth/heldout.jsonl", "evaluation split"},
		{"data/competition_math/test/algebra/1.json", `"test" directory`},
		{"data/some/test/*.parquet", `"test" directory`},
		// Training data, and names that merely contain the words.
		{"data/AI-MO/NuminaMath-CoT/data/train-00000-of-00005.parquet", ""},
		{"data/openbmb/UltraData-Math/data/UltraData-Math-L3/QA-Synthetic/part-0001.parquet", ""},
		{"testdata/data/web.jsonl", ""},
		{"data/latest.parquet", ""},
		{"data/unit_test_generation.jsonl", ""},
		{"data/contest/train.jsonl", ""},
		{"/home/dev/data/train.jsonl", ""},
		{"out/minicpm5-2b-distill/distilled.jsonl", ""},
	}
	for _, c := range cases {
		got := EvalSetReason(c.path)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: reason %q, want %q", c.path, got, c.want)
		}
	}
}

func TestConfigRefusesEvalSets(t *testing.T) {
	dir := t.TempDir()
	// A downloaded dataset directory with its test split beside the
	// training files: only the expanded file list shows it.
	ds := filepath.Join(dir, "numina", "data")
	if err := os.MkdirAll(ds, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"train-00000-of-00001.jsonl", "test-00000-of-00001.jsonl"} {
		writeJSONL(t, filepath.Join(ds, n), textRows("x", 2))
	}
	writeJSONL(t, filepath.Join(dir, "ok.jsonl"), textRows("x", 2))
	cases := []struct {
		name string
		src  SourceConfig
		want string
	}{
		{"training file", SourceConfig{Kind: KindText, Paths: []string{filepath.Join(dir, "ok.jsonl")}}, ""},
		{"directory with a test split", SourceConfig{Kind: KindText, Paths: []string{ds}}, "test-00000-of-00001.jsonl"},
		{"glob over a test split", SourceConfig{Kind: KindText, Paths: []string{filepath.Join(ds, "*.jsonl")}}, "evaluation split"},
		{"only the train files", SourceConfig{Kind: KindText, Paths: []string{filepath.Join(ds, "train-*.jsonl")}}, ""},
		{"benchmark by name", SourceConfig{Name: "gpqa-train", Kind: KindChat, Paths: []string{filepath.Join(dir, "ok.jsonl")}}, "GPQA"},
		{"benchmark path that does not exist yet", SourceConfig{Kind: KindChat, Paths: []string{"data/livecodebench_v6.jsonl"}}, "LiveCodeBench"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Tokenizer, cfg.Out = "tok", filepath.Join(dir, "out")
			cfg.Sources = []SourceConfig{c.src}
			err := cfg.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "evaluation-set guard") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want the guard naming %q", err, c.want)
			}
		})
	}
}
