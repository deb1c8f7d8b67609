package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestExpectedChats(t *testing.T) {
	cases := []struct {
		name, expected string
		tok            func(testing.TB) *Tokenizer
	}{
		{"qwen3", filepath.Join(qwenDir, "expected.json"), qwen},
		{"tiny-llama", filepath.Join(tinyDir, "tokenizer_expected.json"), func(tb testing.TB) *Tokenizer { return load(tb, tinyDir) }},
	}
	for _, c := range cases {
		tok := c.tok(t)
		for i, e := range readExpectations(t, c.expected).Chat {
			t.Run(c.name, func(t *testing.T) {
				prompt, err := tok.ApplyChatTemplate(ChatRequest{
					Messages:            e.Messages,
					AddGenerationPrompt: true,
					EnableThinking:      &e.EnableThinking,
				})
				if err != nil {
					t.Fatal(err)
				}
				if prompt != e.Prompt {
					t.Fatalf("chat %d:\n got %q\nwant %q", i, prompt, e.Prompt)
				}
				if ids := tok.Encode(prompt); !equalIDs(ids, e.IDs) {
					t.Fatalf("chat %d ids = %v, want %v", i, ids, e.IDs)
				}
			})
		}
	}
}

// TestToolChat checks tool definitions, tool calls (dict and string
// arguments), tool responses and reasoning splitting against Python
// Jinja2 (testdata/gen_tools_chat.py).
func TestToolChat(t *testing.T) {
	data, err := os.ReadFile("testdata/qwen3_tools_chat.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Messages       json.RawMessage `json:"messages"`
		Tools          json.RawMessage `json:"tools"`
		EnableThinking bool            `json:"enable_thinking"`
		Prompt         string          `json:"prompt"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	tok := qwen(t)
	for _, c := range cases {
		got, err := tok.ApplyChatTemplate(ChatRequest{
			Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: true, EnableThinking: &c.EnableThinking,
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.Prompt {
			t.Errorf("enable_thinking=%v:\n got %q\nwant %q", c.EnableThinking, got, c.Prompt)
		}
	}
}

func TestChatContentParts(t *testing.T) {
	tok := qwen(t)
	parts := `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`
	plain := `[{"role":"user","content":"a\nb"}]`
	render := func(messages string) (string, error) {
		return tok.ApplyChatTemplate(ChatRequest{Messages: json.RawMessage(messages), AddGenerationPrompt: true})
	}
	got, err := render(parts)
	if err != nil {
		t.Fatal(err)
	}
	want, err := render(plain)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("text parts render %q, want %q", got, want)
	}
	if _, err := render(`[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]`); err == nil || !strings.Contains(err.Error(), "part 0") {
		t.Errorf("image part: err = %v, want an error naming the part", err)
	}
}

func TestChatErrors(t *testing.T) {
	tiny := load(t, tinyDir)
	bare, err := Parse(mustRead(t, filepath.Join(tinyDir, TokenizerFile)), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	withTemplate := func(src string) *Tokenizer {
		tok, err := Parse(mustRead(t, filepath.Join(tinyDir, TokenizerFile)), nil, src)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	user := json.RawMessage(`[{"role":"user","content":"hi"}]`)
	cases := []struct {
		name     string
		tok      *Tokenizer
		messages json.RawMessage
		want     string
	}{
		{"no template", bare, user, "no chat template"},
		{"empty messages", tiny, json.RawMessage(`[]`), "messages: empty"},
		{"bad json", tiny, json.RawMessage(`[{`), "messages"},
		{"unknown tag", withTemplate("ok\n{% generation %}x{% endgeneration %}"), user, "line 2 `{% generation %}x{% endgeneration %}`"},
		{"unknown filter", withTemplate("a\nb\n{{ messages | nosuch }}"), user, "line 3 `{{ messages | nosuch }}`"},
		{"raise_exception", withTemplate("{{ raise_exception('roles must alternate') }}"), user, "roles must alternate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.tok.ApplyChatTemplate(ChatRequest{Messages: c.messages})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestChatTemplateFeatures covers template-visible behaviour the fixtures
// do not: named templates, config variables, Python-style tojson, kwargs
// and undefined enable_thinking.
func TestChatTemplateFeatures(t *testing.T) {
	sp := load(t, spDir)
	qwenTok := qwen(t)
	tools := json.RawMessage(`[{"name":"f","args":{"z":1,"a":[0.5,1e-7,"é\n"]}}]`)
	kwargTpl := "{{ enable_thinking is defined }}|{{ extra.b }}|{{ {'k': [1, 'x']} | tojson(indent=2) }}|{{ 'é' | tojson(ensure_ascii=true) }}"
	cases := []struct {
		name string
		tok  *Tokenizer
		req  ChatRequest
		want string
	}{
		{"default template with bos/eos", sp, ChatRequest{Messages: json.RawMessage(`[{"role":"user","content":"hi"}]`), AddGenerationPrompt: true},
			"<s>[user] hi</s>\n[assistant]"},
		{"tool_use template picked with tools", sp, ChatRequest{Messages: json.RawMessage(`[{"role":"user","content":"hi"}]`), Tools: tools},
			"{\"name\": \"f\", \"args\": {\"z\": 1, \"a\": [0.5, 1e-07, \"é\\n\"]}}\n[user] hi\n"},
		{"thinking undefined by default", qwenTok, ChatRequest{Messages: json.RawMessage(`[{"role":"user","content":"hi"}]`), AddGenerationPrompt: true},
			"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"},
		// Expected output from Python Jinja2 with transformers' settings.
		{"trim_blocks and lstrip_blocks", withSource(t, "{% for m in messages %}\n  {% if m.role == 'user' %}\n<U>{{ m.content }}</U>\n  {% else %}\n<A>{{ m.content }}</A>\n  {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}<A>{% endif %}"),
			ChatRequest{Messages: json.RawMessage(`[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]`), AddGenerationPrompt: true},
			"<U>a</U>\n<A>b</A>\n<A>"},
		{"kwargs and tojson options", withSource(t, kwargTpl), ChatRequest{Messages: json.RawMessage(`[{"role":"user","content":"hi"}]`), Kwargs: map[string]any{"extra": map[string]int{"b": 2}}},
			"False|2|{\n  \"k\": [\n    1,\n    \"x\"\n  ]\n}|\"\\u00e9\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.tok.ApplyChatTemplate(c.req)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestChatConcurrent(t *testing.T) {
	tok := qwen(t)
	e := readExpectations(t, filepath.Join(qwenDir, "expected.json")).Chat
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			c := e[g%len(e)]
			for range 20 {
				got, err := tok.ApplyChatTemplate(ChatRequest{Messages: c.Messages, AddGenerationPrompt: true, EnableThinking: &c.EnableThinking})
				if err != nil || got != c.Prompt {
					t.Errorf("concurrent render: %q, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func withSource(tb testing.TB, src string) *Tokenizer {
	tb.Helper()
	tok, err := Parse(mustRead(tb, filepath.Join(tinyDir, TokenizerFile)), nil, src)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func mustRead(tb testing.TB, path string) []byte {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// TestChatTemplateReadsNoFiles: neither a checkpoint's template nor a
// request's chat_template_kwargs can make rendering read a file. The
// secret sits in a real file that a file-system loader would find by its
// absolute path, by a path relative to the working directory, and by the
// template's own name.
func TestChatTemplateReadsNoFiles(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.txt")
	writeFile(t, secret, []byte("TOP-SECRET"))
	tokJSON := mustRead(t, filepath.Join(tinyDir, TokenizerFile))
	t.Chdir(dir)
	user := json.RawMessage(`[{"role":"user","content":"hi"}]`)
	cases := []struct {
		name   string
		src    string
		kwargs map[string]any
	}{
		{"include absolute", "{% include '" + secret + "' %}", nil},
		{"include relative", "{% include 'secret.txt' %}", nil},
		{"include from kwargs", "{% include inc %}", map[string]any{"inc": secret}},
		{"include ignore missing", "{% include inc ignore missing %}", map[string]any{"inc": secret}},
		{"include list", "{% include [inc, 'x'] %}", map[string]any{"inc": secret}},
		{"import", "{% import '" + secret + "' as s %}{{ s }}", nil},
		{"from import", "{% from inc import x %}{{ x }}", map[string]any{"inc": secret}},
		{"extends", "{% extends '" + secret + "' %}", nil},
		{"extends from kwargs", "{% extends inc %}", map[string]any{"inc": secret}},
		{"include itself", "{% include 'default' %}", nil},
		{"extends itself", "{% extends 'default' %}", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, err := Parse(tokJSON, nil, c.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tok.ApplyChatTemplate(ChatRequest{Messages: user, Kwargs: c.kwargs})
			t.Logf("%q, %v", got, err)
			if strings.Contains(got, "TOP-SECRET") || (err != nil && strings.Contains(err.Error(), "TOP-SECRET")) {
				t.Fatalf("the template read the file: %q, %v", got, err)
			}
		})
	}
}
