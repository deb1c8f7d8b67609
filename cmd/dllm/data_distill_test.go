package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dllm/data"
	"dllm/train"
)

// TestDataDistillCommand runs `dllm data distill` against a fake teacher
// and checks the flags reach the request and the output is written.
func TestDataDistillCommand(t *testing.T) {
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var b map[string]any
		json.NewDecoder(r.Body).Decode(&b)
		bodies = append(bodies, b)
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"4","reasoning_content":"2+2"},"finish_reason":"stop"}],"usage":{"completion_tokens":3}}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	prompts := filepath.Join(dir, "p.jsonl")
	if err := os.WriteFile(prompts, []byte(`{"id":"a","prompt":"2+2?"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "d.jsonl")
	got, err := runData(t, "distill", "--teacher", srv.URL+"/v1", "--prompts", prompts, "--out", out, "--model", "m",
		"--concurrency", "1", "--max-tokens", "99", "--temperature", "0.5", "--top-p", "0.9", "--enable-thinking=false", "--extra", `{"top_k":20}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "1 of 1 answers") {
		t.Errorf("summary %q", got)
	}
	b := bodies[0]
	kw := b["chat_template_kwargs"].(map[string]any)
	if b["model"] != "m" || b["max_tokens"] != 99.0 || b["temperature"] != 0.5 || b["top_p"] != 0.9 || b["top_k"] != 20.0 || kw["enable_thinking"] != false {
		t.Errorf("request %v", b)
	}
	line, _ := os.ReadFile(out)
	if !strings.Contains(string(line), `"reasoning_content":"2+2"`) {
		t.Errorf("output %s", line)
	}
	if _, err := runData(t, "distill", "--teacher", srv.URL, "--prompts", prompts, "--extra", "[1]"); err == nil || !strings.Contains(err.Error(), "--extra") {
		t.Errorf("bad --extra: %v", err)
	}
}

// TestRecipeConfigs keeps the MiniCPM5-2B recipe's presets loadable and
// valid (their inputs are downloaded corpora, so only the settings are
// checked here).
func TestRecipeConfigs(t *testing.T) {
	for _, p := range []string{"minicpm5-2b-cpt.yaml", "minicpm5-2b-sft.yaml"} {
		cfg := data.DefaultConfig()
		if err := cfg.LoadConfig(filepath.Join("../../configs/data", p)); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range []string{"minicpm5-2b-block.yaml", "minicpm5-2b-sft.yaml"} {
		cfg := train.DefaultConfig()
		if err := cfg.Load(filepath.Join("../../configs/train", p)); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
