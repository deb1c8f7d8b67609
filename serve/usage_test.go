package serve

import (
	"encoding/json"
	"testing"
)

// TestUsageDLLMExtension: usage carries dllm's steps and tokens per forward
// beside OpenAI's counts (the fake engine takes 2 steps per 4-token block).
func TestUsageDLLMExtension(t *testing.T) {
	eng := &fakeEngine{ids: []int64{10, 11, 12, 13, 14, 15, 16, 17}, eos: true}
	_, ts := testServer(t, eng, Config{})
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":100}`
		if path == "/v1/completions" {
			body = `{"prompt":"Hi","max_tokens":100}`
		}
		_, b := post(t, ts.URL+path, body)
		var r struct {
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
				DLLM             *struct {
					Steps int     `json:"steps"`
					TPF   float64 `json:"tpf"`
				} `json:"dllm"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
		if d := r.Usage.DLLM; r.Usage.CompletionTokens != 8 || d == nil || d.Steps != 4 || d.TPF != 2 {
			t.Errorf("%s: usage %s", path, b)
		}
	}
}
