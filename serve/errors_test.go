package serve

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestBadRequests: every malformed request is a 400 (or 404/405/413) in
// OpenAI's error shape naming the field, and the server keeps serving.
func TestBadRequests(t *testing.T) {
	eng := &fakeEngine{output: "ok", eos: true}
	_, ts := testServer(t, eng, Config{MaxBodyBytes: 64 << 10}, func(m *Model) { m.ContextLength = 64 })
	const msgs = `"messages":[{"role":"user","content":"Hi"}]`
	long := strings.Repeat("word ", 100)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		param                    string // "" = don't check
		inMessage                string
	}{
		{"not json", "POST", "/v1/chat/completions", `{"messages": [`, 400, "", "invalid JSON"},
		{"syntax", "POST", "/v1/chat/completions", `{"messages": [}`, 400, "", "invalid JSON"},
		{"empty body", "POST", "/v1/chat/completions", ``, 400, "", "empty"},
		{"array body", "POST", "/v1/chat/completions", `[1,2]`, 400, "", "JSON object"},
		{"trailing data", "POST", "/v1/chat/completions", `{` + msgs + `} {}`, 400, "", "after"},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"tiny"}`, 400, "messages", "required"},
		{"empty messages", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "messages", "empty"},
		{"messages not array", "POST", "/v1/chat/completions", `{"messages":"hi"}`, 400, "messages", "array"},
		{"message not object", "POST", "/v1/chat/completions", `{"messages":[42]}`, 400, "messages[0]", ""},
		{"no role", "POST", "/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "messages[0].role", "required"},
		{"bad role", "POST", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"x"}]}`, 400, "messages[0].role", "wizard\" is not one of system, developer, user"},
		{"image part", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0]", "text"},
		{"content number", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", ""},
		{"n 2", "POST", "/v1/chat/completions", `{` + msgs + `,"n":2}`, 400, "n", "n must be 1"},
		{"n 0", "POST", "/v1/chat/completions", `{` + msgs + `,"n":0}`, 400, "n", ""},
		{"temperature string", "POST", "/v1/chat/completions", `{` + msgs + `,"temperature":"hot"}`, 400, "temperature", "number"},
		{"temperature range", "POST", "/v1/chat/completions", `{` + msgs + `,"temperature":3}`, 400, "temperature", ""},
		{"temperature negative", "POST", "/v1/chat/completions", `{` + msgs + `,"temperature":-0.1}`, 400, "temperature", ""},
		{"top_p zero", "POST", "/v1/chat/completions", `{` + msgs + `,"top_p":0}`, 400, "top_p", ""},
		{"top_p big", "POST", "/v1/chat/completions", `{` + msgs + `,"top_p":1.5}`, 400, "top_p", ""},
		{"max_tokens zero", "POST", "/v1/chat/completions", `{` + msgs + `,"max_tokens":0}`, 400, "max_tokens", "at least 1"},
		{"max_tokens negative", "POST", "/v1/chat/completions", `{` + msgs + `,"max_tokens":-5}`, 400, "max_tokens", ""},
		{"max_completion_tokens negative", "POST", "/v1/chat/completions", `{` + msgs + `,"max_completion_tokens":-1}`, 400, "max_completion_tokens", ""},
		{"max_tokens float", "POST", "/v1/chat/completions", `{` + msgs + `,"max_tokens":1.5}`, 400, "max_tokens", "integer"},
		{"max_tokens too big for int64", "POST", "/v1/chat/completions", `{` + msgs + `,"max_tokens":1e40}`, 400, "max_tokens", ""},
		{"seed string", "POST", "/v1/chat/completions", `{` + msgs + `,"seed":"x"}`, 400, "seed", ""},
		{"stream string", "POST", "/v1/chat/completions", `{` + msgs + `,"stream":"yes"}`, 400, "stream", "boolean"},
		{"stop number", "POST", "/v1/chat/completions", `{` + msgs + `,"stop":5}`, 400, "stop", ""},
		{"stop empty", "POST", "/v1/chat/completions", `{` + msgs + `,"stop":[""]}`, 400, "stop", ""},
		{"too many stops", "POST", "/v1/chat/completions", `{` + msgs + `,"stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}`, 400, "stop", ""},
		{"logprobs", "POST", "/v1/chat/completions", `{` + msgs + `,"logprobs":true}`, 400, "logprobs", ""},
		{"threshold", "POST", "/v1/chat/completions", `{` + msgs + `,"threshold":0}`, 400, "threshold", ""},
		{"tokens_per_step", "POST", "/v1/chat/completions", `{` + msgs + `,"tokens_per_step":0}`, 400, "tokens_per_step", ""},
		{"max_commit", "POST", "/v1/chat/completions", `{` + msgs + `,"max_commit":-1}`, 400, "max_commit", ""},
		{"min_commit above max", "POST", "/v1/chat/completions", `{` + msgs + `,"max_commit":2,"min_commit":3}`, 400, "min_commit", ""},
		{"error_budget", "POST", "/v1/chat/completions", `{` + msgs + `,"error_budget":-1}`, 400, "error_budget", ""},
		{"verify sampling", "POST", "/v1/chat/completions", `{` + msgs + `,"verify":true,"temperature":0.7}`, 400, "verify", "greedy"},
		{"verify fixed commit", "POST", "/v1/chat/completions", `{` + msgs + `,"verify":true,"temperature":0,"tokens_per_step":2}`, 400, "verify", ""},
		{"verify string", "POST", "/v1/chat/completions", `{` + msgs + `,"verify":"yes"}`, 400, "verify", "boolean"},
		{"enable_thinking string", "POST", "/v1/chat/completions", `{` + msgs + `,"chat_template_kwargs":{"enable_thinking":"yes"}}`, 400, "chat_template_kwargs.enable_thinking", ""},
		{"kwargs not object", "POST", "/v1/chat/completions", `{` + msgs + `,"chat_template_kwargs":[1]}`, 400, "chat_template_kwargs", ""},
		{"prompt too long", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "messages", "context length"},
		{"body too large", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 70<<10) + `"}]}`, 413, "", "larger"},
		{"another model", "POST", "/v1/chat/completions", `{"model":"gpt-4",` + msgs + `}`, 404, "", `the model "gpt-4" does not exist; this server has "tiny"`},
		{"another model, completion", "POST", "/v1/completions", `{"model":"gpt-4","prompt":"a"}`, 404, "", "does not exist"},
		{"block_size 0", "POST", "/v1/chat/completions", `{` + msgs + `,"block_size":0}`, 400, "block_size", "between 1 and 4"},
		{"block_size above training", "POST", "/v1/chat/completions", `{` + msgs + `,"block_size":8}`, 400, "block_size", "trained for"},
		{"steps", "POST", "/v1/chat/completions", `{` + msgs + `,"steps":64}`, 400, "steps", "tokens_per_step"},
		{"random remasking", "POST", "/v1/chat/completions", `{` + msgs + `,"remasking":"random"}`, 400, "remasking", "low_confidence"},
		{"top_k", "POST", "/v1/chat/completions", `{` + msgs + `,"top_k":40}`, 400, "top_k", "top_p"},
		{"json mode", "POST", "/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"json_object"}}`, 400, "response_format", "not supported"},
		{"tools", "POST", "/v1/chat/completions", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "tools", "not supported"},
		{"logit_bias", "POST", "/v1/completions", `{"prompt":"a","logit_bias":{"5":10}}`, 400, "logit_bias", ""},
		{"completion no prompt", "POST", "/v1/completions", `{"max_tokens":3}`, 400, "prompt", ""},
		{"completion batch", "POST", "/v1/completions", `{"prompt":["a","b"]}`, 400, "prompt", "exactly one"},
		{"completion id batch", "POST", "/v1/completions", `{"prompt":[[1],[2]]}`, 400, "prompt", "exactly one"},
		{"completion bad id", "POST", "/v1/completions", `{"prompt":[1, 99999]}`, 400, "prompt", "99999"},
		{"completion negative id", "POST", "/v1/completions", `{"prompt":[-1]}`, 400, "prompt", ""},
		{"completion empty ids", "POST", "/v1/completions", `{"prompt":[]}`, 400, "prompt", ""},
		{"completion empty text", "POST", "/v1/completions", `{"prompt":""}`, 400, "prompt", ""},
		{"completion object prompt", "POST", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt", ""},
		{"completion echo", "POST", "/v1/completions", `{"prompt":"a","echo":true}`, 400, "echo", ""},
		{"completion too long", "POST", "/v1/completions", `{"prompt":"` + long + `"}`, 400, "prompt", "context length"},
		{"unknown route", "POST", "/v1/embeddings", `{}`, 404, "", "no route"},
		{"root", "GET", "/", ``, 404, "", ""},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, "", "POST"},
		{"wrong method health", "POST", "/health", `{}`, 405, "", "GET"},
		{"put completions", "PUT", "/v1/completions", `{}`, 405, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, b := do(t, req)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			e := decodeError(t, b)
			if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
				t.Errorf("param = %v, want %q (%s)", e.Error.Param, tc.param, b)
			}
			if !strings.Contains(e.Error.Message, tc.inMessage) {
				t.Errorf("message %q does not mention %q", e.Error.Message, tc.inMessage)
			}
			if tc.status == 405 && resp.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	if eng.calls != 0 {
		t.Errorf("the engine ran %d times for bad requests", eng.calls)
	}
	// Still serving.
	resp, b := post(t, ts.URL+"/v1/chat/completions", `{`+msgs+`}`)
	decodeChat(t, resp, b)
}

// TestLoading: before SetModel everything but routing errors is 503.
func TestLoading(t *testing.T) {
	s := New(Config{ModelName: "m", Logger: discardLogger()})
	ts := newHTTPTest(t, s)
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/health", ""},
		{"GET", "/v1/models", ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`},
		{"POST", "/v1/completions", `{"prompt":"Hi"}`},
	} {
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
		resp, b := do(t, req)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s: %d (Retry-After %q): %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
		if tc.path != "/health" {
			decodeError(t, b)
		}
	}
}

// Fields other tools send work where the decoder allows, are accepted at
// values that change nothing, and unknown ones are ignored with a warning.
func TestRequestFields(t *testing.T) {
	eng := &fakeEngine{output: "ok", eos: true}
	var logs strings.Builder
	_, ts := testServer(t, eng, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	const msgs = `"messages":[{"role":"user","content":"Hi"}]`
	for _, c := range []struct{ body, check string }{
		{`{` + msgs + `,"block_size":2}`, "block 2"},
		{`{"model":"tiny",` + msgs + `,"remasking":"low_confidence","top_k":-1,"response_format":{"type":"text"},"tool_choice":"none","tools":[]}`, "block 4"},
		{`{` + msgs + `,"frobnicate":1,"min_p":0.1}`, "block 4"},
	} {
		resp, b := post(t, ts.URL+"/v1/chat/completions", c.body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.body, resp.StatusCode, b)
		}
		if got := fmt.Sprintf("block %d", eng.lastOptions().BlockSize); got != c.check {
			t.Errorf("%s: %s, want %s", c.body, got, c.check)
		}
	}
	if !strings.Contains(logs.String(), "ignoring unknown request fields") || !strings.Contains(logs.String(), "frobnicate, min_p") {
		t.Errorf("no warning naming the unknown fields:\n%s", logs.String())
	}
}

// GET /metrics counts finished requests, tokens and steps, says what runs
// and waits, and keeps Prometheus' text format (histograms cumulative).
func TestMetrics(t *testing.T) {
	eng := &fakeEngine{output: "one two three", eos: true}
	_, ts := testServer(t, eng, Config{})
	const msgs = `"messages":[{"role":"user","content":"Hi"}]`
	for range 2 {
		if resp, b := post(t, ts.URL+"/v1/chat/completions", `{`+msgs+`}`); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	if resp, b := post(t, ts.URL+"/v1/chat/completions", `{`+msgs+`,"max_tokens":1}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	text := string(body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		"dllm_num_requests_running 0\n", "dllm_num_requests_waiting 0\n", "dllm_model_ready 1\n",
		`dllm_request_success_total{finished_reason="stop"} 2` + "\n", `dllm_request_success_total{finished_reason="length"} 1` + "\n",
		"# TYPE dllm_e2e_request_latency_seconds histogram\n", `dllm_e2e_request_latency_seconds_bucket{le="+Inf"} 3` + "\n",
		"dllm_e2e_request_latency_seconds_count 3\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
	if !strings.Contains(text, "dllm_generation_tokens_total ") || strings.Contains(text, "dllm_generation_tokens_total 0\n") {
		t.Errorf("generation tokens not counted:\n%s", text)
	}
}
