package serve

import (
	"slices"
	"testing"
)

func TestCompletions(t *testing.T) {
	eng := &fakeEngine{output: " and then some", eos: true}
	_, ts := testServer(t, eng, Config{})
	tok := tinyTokenizer(t)
	hello := toInt64(tok.Encode("Hello"))
	for _, tc := range []struct {
		name, prompt string
		want         []int64
	}{
		{"string", `"Hello"`, hello},
		{"list of one string", `["Hello"]`, hello},
		{"ids", `[5, 6, 7]`, []int64{5, 6, 7}},
		{"list of one id list", `[[5, 6, 7]]`, []int64{5, 6, 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts.URL+"/v1/completions", `{"model":"tiny","prompt":`+tc.prompt+`,"max_tokens":50}`)
			r := decodeChat(t, resp, b)
			if r.Object != "text_completion" || r.Choices[0].Text != " and then some" || r.Choices[0].FinishReason != "stop" {
				t.Errorf("response %s", b)
			}
			if !slices.Equal(eng.prompt, tc.want) {
				t.Errorf("prompt %v, want %v", eng.prompt, tc.want)
			}
			if r.Usage.PromptTokens != len(tc.want) {
				t.Errorf("usage %+v", r.Usage)
			}
		})
	}
	// OpenAI's default max_tokens for completions is 16.
	post(t, ts.URL+"/v1/completions", `{"prompt":"Hi"}`)
	if got := eng.lastOptions().MaxNewTokens; got != 16 {
		t.Errorf("default max_tokens %d, want 16", got)
	}
	// No reasoning split for raw completions: think tags stay in the text.
	eng.output = "<think>x</think>y"
	resp, b := post(t, ts.URL+"/v1/completions", `{"prompt":"Hi","stop":"y"}`)
	if r := decodeChat(t, resp, b); r.Choices[0].Text != "<think>x</think>" || r.Choices[0].FinishReason != "stop" {
		t.Errorf("response %s", b)
	}
}

func TestCompletionsStream(t *testing.T) {
	eng := &fakeEngine{output: "streamed completion text", eos: true, block: 2}
	_, ts := testServer(t, eng, Config{})
	_, b := post(t, ts.URL+"/v1/completions", `{"prompt":"Hi","stream":true,"max_tokens":100,"stream_options":{"include_usage":true}}`)
	s := parseStream(t, b)
	if !s.done || s.content != "streamed completion text" || s.finish != "stop" || s.usage == nil {
		t.Errorf("stream %+v", s)
	}
	for _, c := range s.chunks {
		if c.Object != "text_completion" || c.ID != s.chunks[0].ID {
			t.Errorf("chunk %+v", c)
		}
	}
}
