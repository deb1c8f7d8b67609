package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestChatNonStream(t *testing.T) {
	eng := &fakeEngine{output: "Hello there, friend.", eos: true}
	_, ts := testServer(t, eng, Config{})
	resp, b := post(t, ts.URL+"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"there"}]}],"max_tokens":100,"temperature":0.5,"top_p":0.9,"seed":7,"some_unknown_field":{"x":1}}`)
	r := decodeChat(t, resp, b)
	if !strings.HasPrefix(r.ID, "chatcmpl-") || r.Object != "chat.completion" || r.Model != "tiny" {
		t.Errorf("id/object/model = %q %q %q", r.ID, r.Object, r.Model)
	}
	c := r.Choices[0]
	if c.Message.Role != "assistant" || c.Message.Content != "Hello there, friend." || c.FinishReason != "stop" {
		t.Errorf("choice = %+v", c)
	}
	if c.Message.ReasoningContent != nil || c.Message.Reasoning != nil {
		t.Errorf("reasoning without <think>: %s", b)
	}
	n := len(eng.tok.Encode("Hello there, friend."))
	if r.Usage.CompletionTokens != n || r.Usage.PromptTokens != len(eng.prompt) || r.Usage.TotalTokens != n+len(eng.prompt) {
		t.Errorf("usage = %+v, want %d completion, %d prompt", r.Usage, n, len(eng.prompt))
	}
	o := eng.lastOptions()
	if o.Temperature != 0.5 || o.TopP != 0.9 || o.Seed != 7 || o.MaxNewTokens != 100 || o.ContextLimit != 4096 || o.BlockSize != 4 || len(o.StopIDs) != 1 {
		t.Errorf("options = %+v", o)
	}
	prompt := eng.tok.Decode(toInts(eng.prompt), false)
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n"
	if prompt != want {
		t.Errorf("prompt = %q, want %q", prompt, want)
	}
}

func toInts(ids []int64) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func TestChatDefaults(t *testing.T) {
	eng := &fakeEngine{output: "x", eos: true}
	_, ts := testServer(t, eng, Config{DefaultMaxTokens: 1000}, func(m *Model) {
		m.Defaults.Temperature, m.Defaults.TopP = 0.7, 0.95
	})
	resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	decodeChat(t, resp, b)
	o := eng.lastOptions()
	if o.Temperature != 0.7 || o.TopP != 0.95 || o.MaxNewTokens != 1000 || o.Threshold != 0.9 {
		t.Errorf("options = %+v", o)
	}
	// Explicit zero temperature (greedy) overrides a non-zero default.
	resp, b = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"temperature":0,"threshold":0.5}`)
	decodeChat(t, resp, b)
	if o := eng.lastOptions(); o.Temperature != 0 || o.Threshold != 0.5 || o.FixedCommit != 0 {
		t.Errorf("options = %+v", o)
	}
	// The benchmark extension: a fixed number of commits per step.
	resp, b = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"tokens_per_step":3}`)
	decodeChat(t, resp, b)
	if o := eng.lastOptions(); o.FixedCommit != 3 || len(o.StopIDs) == 0 {
		t.Errorf("tokens_per_step 3: options = %+v", o)
	}
	// The sampler extensions: a commit cap and verify decoding.
	resp, b = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"temperature":0,"max_commit":2,"min_commit":1,"error_budget":0.3,"verify":true}`)
	decodeChat(t, resp, b)
	if o := eng.lastOptions(); o.MaxCommit != 2 || o.MinCommit != 1 || o.ErrorBudget != 0.3 || !o.Verify {
		t.Errorf("max_commit 2, verify: options = %+v", o)
	}
	resp, b = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"ignore_eos":true}`)
	decodeChat(t, resp, b)
	if o := eng.lastOptions(); len(o.StopIDs) != 0 {
		t.Errorf("ignore_eos: stop ids %v", o.StopIDs)
	}
}

// dllm.json's verify applies to greedy requests that do not say otherwise.
func TestVerifyDefault(t *testing.T) {
	eng := &fakeEngine{output: "x", eos: true}
	_, ts := testServer(t, eng, Config{}, func(m *Model) { m.Defaults.Verify = true })
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"messages":[{"role":"user","content":"Hi"}]}`, true},
		{`{"messages":[{"role":"user","content":"Hi"}],"temperature":0.7}`, false},
		{`{"messages":[{"role":"user","content":"Hi"}],"tokens_per_step":2}`, false},
		{`{"messages":[{"role":"user","content":"Hi"}],"verify":false}`, false},
	} {
		resp, b := post(t, ts.URL+"/v1/chat/completions", c.body)
		decodeChat(t, resp, b)
		if o := eng.lastOptions(); o.Verify != c.want {
			t.Errorf("%s: verify %v, want %v", c.body, o.Verify, c.want)
		}
	}
}

func TestMaxTokens(t *testing.T) {
	eng := &fakeEngine{output: "abc def ghi", eos: true}
	_, ts := testServer(t, eng, Config{}, func(m *Model) { m.ContextLength = 100 })
	var promptLen int
	for _, tc := range []struct {
		body string
		want int // MaxNewTokens; -1: room left in the context
	}{
		{`"max_tokens": 5`, 5},
		{`"max_completion_tokens": 7`, 7},
		{`"max_tokens": 5, "max_completion_tokens": 9`, 9},
		{`"max_tokens": 1000000000000`, -1},
		{``, -1}, // default 32768, capped by the context
	} {
		body := `{"messages":[{"role":"user","content":"Hi"}]`
		if tc.body != "" {
			body += "," + tc.body
		}
		resp, b := post(t, ts.URL+"/v1/chat/completions", body+"}")
		decodeChat(t, resp, b)
		promptLen = len(eng.prompt)
		want := tc.want
		if want < 0 {
			want = 100 - promptLen
		}
		if got := eng.lastOptions().MaxNewTokens; got != want {
			t.Errorf("%s: MaxNewTokens = %d, want %d", tc.body, got, want)
		}
	}
}

func TestChatStream(t *testing.T) {
	const text = "Streaming one block at a time, héllo wörld 😀."
	for _, includeUsage := range []bool{false, true} {
		t.Run(fmt.Sprint("usage=", includeUsage), func(t *testing.T) {
			eng := &fakeEngine{output: text, eos: true, block: 3}
			_, ts := testServer(t, eng, Config{})
			resp, b := post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":%v}}`, includeUsage))
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			s := parseStream(t, b)
			if !s.done {
				t.Fatal("no [DONE]")
			}
			if s.content != text || s.reasoning != "" || s.finish != "stop" {
				t.Errorf("content %q reasoning %q finish %q", s.content, s.reasoning, s.finish)
			}
			first := s.chunks[0]
			if r := first.Choices[0].Delta.Role; r == nil || *r != "assistant" {
				t.Errorf("first chunk has no assistant role: %+v", first)
			}
			for i, c := range s.chunks {
				if c.ID != first.ID || c.Object != "chat.completion.chunk" || c.Model != "tiny" {
					t.Errorf("chunk %d: id %q object %q model %q", i, c.ID, c.Object, c.Model)
				}
				if i > 0 && len(c.Choices) > 0 && c.Choices[0].Delta.Role != nil {
					t.Errorf("chunk %d repeats the role", i)
				}
			}
			// Content arrives in several chunks, not all at the end.
			if n := len(s.chunks); n < 4 {
				t.Errorf("only %d chunks", n)
			}
			last := s.chunks[len(s.chunks)-1]
			if includeUsage {
				n := len(eng.tok.Encode(text))
				if len(last.Choices) != 0 || last.Usage == nil || last.Usage.CompletionTokens != n || last.Usage.TotalTokens != n+len(eng.prompt) {
					t.Errorf("last chunk is not the usage chunk: %+v", last)
				}
				last = s.chunks[len(s.chunks)-2]
			} else if s.usage != nil {
				t.Error("usage sent without include_usage")
			}
			if len(last.Choices) != 1 || last.Choices[0].FinishReason == nil {
				t.Errorf("finish_reason not in the last choice chunk: %+v", last)
			}
		})
	}
}

// TestStreamUTF8 feeds a character's bytes in separate blocks: no chunk
// may carry a broken character.
func TestStreamUTF8(t *testing.T) {
	tok := tinyTokenizer(t)
	ids := toInt64(tok.Encode("añ😀b"))
	eng := &fakeEngine{ids: ids, eos: true, block: 1}
	_, ts := testServer(t, eng, Config{})
	_, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"stream":true}`)
	s := parseStream(t, b)
	if s.content != "añ😀b" {
		t.Errorf("content = %q", s.content)
	}
	for _, c := range s.chunks {
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil && strings.ContainsRune(*c.Choices[0].Delta.Content, '\uFFFD') {
			t.Errorf("broken character in %q", *c.Choices[0].Delta.Content)
		}
	}
}

func TestReasoningSplit(t *testing.T) {
	openThink := "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n<think>\n"
	for _, tc := range []struct {
		name, template, output     string
		wantReasoning, wantContent string
		kwargs                     string
	}{
		{name: "tags generated", output: "<think>\nLet me think.\nYes.\n</think>\n\nThe answer is 4.",
			wantReasoning: "Let me think.\nYes.", wantContent: "The answer is 4."},
		{name: "prompt opens think", template: openThink, output: "Pondering.\n</think>\n\n42",
			wantReasoning: "Pondering.", wantContent: "42"},
		{name: "thinking disabled", output: "Just the answer.", kwargs: `"chat_template_kwargs":{"enable_thinking":false},`,
			wantContent: "Just the answer."},
		{name: "unfinished thought", output: "<think>\nstill going and going",
			wantReasoning: "still going and going"},
		{name: "no think", output: "plain < text",
			wantContent: "plain < text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &fakeEngine{output: tc.output, eos: true, block: 2}
			if tc.template != "" {
				eng.tok = tokenizerWithTemplate(t, tc.template)
			}
			_, ts := testServer(t, eng, Config{})
			body := `{"messages":[{"role":"user","content":"2+2?"}],` + tc.kwargs
			resp, b := post(t, ts.URL+"/v1/chat/completions", body+`"max_tokens":200}`)
			r := decodeChat(t, resp, b)
			m := r.Choices[0].Message
			reasoning := ""
			if m.ReasoningContent != nil {
				reasoning = *m.ReasoningContent
				if m.Reasoning == nil || *m.Reasoning != reasoning {
					t.Errorf("reasoning not mirrored: %s", b)
				}
			}
			if reasoning != tc.wantReasoning || m.Content != tc.wantContent {
				t.Errorf("reasoning %q content %q, want %q %q", reasoning, m.Content, tc.wantReasoning, tc.wantContent)
			}
			_, b = post(t, ts.URL+"/v1/chat/completions", body+`"max_tokens":200,"stream":true}`)
			s := parseStream(t, b)
			if s.reasoning != tc.wantReasoning || s.content != tc.wantContent {
				t.Errorf("streamed reasoning %q content %q, want %q %q", s.reasoning, s.content, tc.wantReasoning, tc.wantContent)
			}
			for _, c := range s.chunks {
				if len(c.Choices) == 0 {
					continue
				}
				d := c.Choices[0].Delta
				if d.ReasoningContent != nil && (d.Reasoning == nil || *d.Reasoning != *d.ReasoningContent) {
					t.Errorf("delta reasoning not mirrored")
				}
				for _, p := range []*string{d.Content, d.ReasoningContent} {
					if p != nil && strings.Contains(*p, "think>") {
						t.Errorf("a think tag leaked: %q", *p)
					}
				}
			}
		})
	}
}

// TestStopStrings cuts at a stop string spread over blocks, in whole and
// streamed responses, and never streams text past it.
func TestStopStrings(t *testing.T) {
	const text = "one two three STOP four five six seven eight"
	for _, tc := range []struct {
		stop string
		want string
	}{
		{`"STOP"`, "one two three "},
		{`["nothing", "ee S"]`, "one two thr"},
		{`["two", "one"]`, ""},
		{`"absent"`, text},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.stop, stream), func(t *testing.T) {
				eng := &fakeEngine{output: text, eos: true, block: 2}
				_, ts := testServer(t, eng, Config{})
				body := fmt.Sprintf(`{"messages":[{"role":"user","content":"Hi"}],"stop":%s,"stream":%v}`, tc.stop, stream)
				resp, b := post(t, ts.URL+"/v1/chat/completions", body)
				var content, finish string
				if stream {
					s := parseStream(t, b)
					content, finish = s.content, s.finish
				} else {
					r := decodeChat(t, resp, b)
					content, finish = r.Choices[0].Message.Content, r.Choices[0].FinishReason
				}
				if content != tc.want || finish != "stop" {
					t.Errorf("content %q finish %q, want %q stop", content, finish, tc.want)
				}
				if tc.want != text {
					// The engine was told to stop: it did not run to the end.
					if all := len(eng.tok.Encode(text)); eng.blocks*2 >= all {
						t.Errorf("engine ran %d blocks for %d tokens: not stopped", eng.blocks, all)
					}
				}
			})
		}
	}
}

func TestChatLength(t *testing.T) {
	eng := &fakeEngine{output: "a b c d e f g h i j k l m n o p", block: 4}
	_, ts := testServer(t, eng, Config{})
	resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6}`)
	r := decodeChat(t, resp, b)
	if r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 6 {
		t.Errorf("finish %q, %d tokens", r.Choices[0].FinishReason, r.Usage.CompletionTokens)
	}
}

func TestModelsAndHealth(t *testing.T) {
	_, ts := testServer(t, &fakeEngine{}, Config{ModelName: "my-model"})
	resp, b := get(t, ts.URL+"/v1/models")
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil || resp.StatusCode != 200 || list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "my-model" || list.Data[0].Object != "model" {
		t.Errorf("models: %d %s", resp.StatusCode, b)
	}
	if resp, b := get(t, ts.URL+"/v1/models/my-model"); resp.StatusCode != 200 || !strings.Contains(string(b), `"id":"my-model"`) {
		t.Errorf("model: %d %s", resp.StatusCode, b)
	}
	if resp, b := get(t, ts.URL+"/v1/models/other"); resp.StatusCode != 404 {
		t.Errorf("unknown model: %d %s", resp.StatusCode, b)
	}
	if resp, b := get(t, ts.URL+"/health"); resp.StatusCode != 200 || !strings.Contains(string(b), `"ok"`) {
		t.Errorf("health: %d %s", resp.StatusCode, b)
	}
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, []byte(b.String())
}
