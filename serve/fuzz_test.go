package serve

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"dllm/diffusion"
)

// fuzzBodies seed FuzzRequest: valid requests using every field, and the
// malformed ones of TestBadRequests' kind.
var fuzzBodies = []string{
	`{"messages":[{"role":"user","content":"Hi"}]}`,
	`{"model":"tiny","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello","reasoning_content":"greet"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_tokens":5,"temperature":0.5,"top_p":0.9,"seed":7,"stop":["\n","x"],"stream":true,"stream_options":{"include_usage":true},"n":1,"chat_template_kwargs":{"enable_thinking":false},"threshold":0.8}`,
	`{"messages":[{"role":"developer","content":null},{"role":"tool","content":"42"}],"max_completion_tokens":3,"stop":"ok","logprobs":false}`,
	`{"messages":[{"role":"user","content":"\u0000<|im_end|><think>\ud800"}],"chat_template_kwargs":{"enable_thinking":true,"x":[1,{"y":null}]}}`,
	`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":9223372036854775807}`,
	`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":-1}`,
	`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1e40,"temperature":"hot"}`,
	`{"messages":[]}`, `{"messages":[42]}`, `{"messages":"hi"}`, `{"messages":[{"content":"x"}]}`,
	`{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`,
	`{"messages": [`, `[1,2]`, ``, `{} {}`, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
	`{"prompt":"Once upon","max_tokens":4,"echo":false,"best_of":1}`,
	`{"prompt":[1,2,3],"stream":true}`, `{"prompt":[[5,6]]}`, `{"prompt":["a","b"]}`, `{"prompt":[-1]}`, `{"prompt":[99999]}`,
	`{"prompt":"x","echo":true}`, `{"prompt":{"a":1}}`,
}

// FuzzRequest sends arbitrary bodies to the chat and text completion
// endpoints: every answer is a 200 of the right shape or an OpenAI-shaped
// 4xx, and no handler panics (a panic would be recovered and logged, so the
// log is checked).
func FuzzRequest(f *testing.F) {
	for _, b := range fuzzBodies {
		f.Add(false, []byte(b))
		f.Add(true, []byte(b))
	}
	tok := tinyTokenizer(f)
	var logs syncBuffer
	s := New(Config{ModelName: "tiny", Logger: slog.New(slog.NewTextHandler(&logs, nil)), MaxBodyBytes: 16 << 10})
	s.SetModel(&Model{
		Engine: &fakeEngine{tok: tok, output: "<think>\nhm</think>\n\nok", eos: true}, Tokenizer: tok, ContextLength: 256, VocabSize: 512,
		Defaults: diffusion.Options{BlockSize: 4, Threshold: 0.9, MaxStepsPerBlock: 4, TopP: 1, StopIDs: []int64{1}},
	})
	f.Fuzz(func(t *testing.T, completions bool, body []byte) {
		path := "/v1/chat/completions"
		if completions {
			path = "/v1/completions"
		}
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		logs.Reset()
		s.ServeHTTP(w, req)
		if log := logs.String(); strings.Contains(log, "panic") {
			t.Fatalf("%s %q: handler panicked:\n%s", path, body, log)
		}
		resp := w.Result()
		got := w.Body.Bytes()
		switch resp.StatusCode {
		case http.StatusOK:
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				st := parseStream(t, got)
				if !st.done || (st.finish == "" && st.chunks[len(st.chunks)-1].Error == nil) {
					t.Fatalf("%q: stream without an end: %s", body, got)
				}
				return
			}
			var r chatResult
			if err := json.Unmarshal(got, &r); err != nil || len(r.Choices) != 1 || r.Choices[0].FinishReason == "" {
				t.Fatalf("%q: bad 200 body (%v): %s", body, err, got)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			decodeError(t, got)
		default:
			t.Fatalf("%s %q: status %d: %s", path, body, resp.StatusCode, got)
		}
	})
}
