package tokenizer

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// chatFuzzMessages seed the chat fuzzers: what the server passes on (roles,
// string and list content, reasoning, tool calls) and what it may not.
var chatFuzzMessages = []string{
	`[{"role":"user","content":"Hi"}]`,
	`[{"role":"system","content":"Be brief."},{"role":"user","content":"2+2?"},{"role":"assistant","content":"<think>\nadd\n</think>\n\n4"},{"role":"user","content":"and 3+3?"}]`,
	`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":"x","reasoning_content":"r"}]`,
	`[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"x":1}}}]},{"role":"tool","content":"<tool_response>1</tool_response>"}]`,
	`[{"role":"user","content":null}]`, `[{"role":"user"}]`, `[{"role":1,"content":2}]`, `[]`, `{}`, `[[]]`, `null`, `[{"content":[{"type":"image"}]}]`,
	`[{"role":"user","content":"\u0000\ud800 <|im_end|>{{ x }}{% raw %}"}]`,
}

// FuzzChatMessages renders request-controlled input, the messages and
// chat_template_kwargs of a chat request, through the Qwen3 template the
// test models ship: an error or a prompt, never a panic.
func FuzzChatMessages(f *testing.F) {
	for _, m := range chatFuzzMessages {
		f.Add([]byte(m), []byte(`{}`))
		f.Add([]byte(m), []byte(`{"enable_thinking":false,"tools":[{"type":"function","function":{"name":"f"}}]}`))
	}
	f.Add([]byte(chatFuzzMessages[0]), []byte(`{"messages":"overridden?","add_generation_prompt":[1],"bos_token":{"a":null}}`))
	tok := load(f, tinyDir)
	f.Fuzz(func(t *testing.T, messages, kwargs []byte) {
		var kw map[string]any
		if json.Unmarshal(kwargs, &kw) != nil {
			kw = nil
		}
		for _, gen := range []bool{true, false} {
			req := ChatRequest{Messages: messages, AddGenerationPrompt: gen, Kwargs: kw}
			if v, ok := kw["enable_thinking"].(bool); ok {
				req.EnableThinking = &v
			}
			if tools, ok := kw["tools"]; ok {
				req.Tools, _ = json.Marshal(tools)
			}
			tok.ApplyChatTemplate(req)
		}
	})
}

// FuzzChatTemplate parses and renders arbitrary template sources (a
// checkpoint's chat_template.jinja is input too): a template gonja cannot
// handle is an error when rendering, never a panic at load or render time,
// and no template reads a file.
func FuzzChatTemplate(f *testing.F) {
	base := load(f, tinyDir)
	secretFile, secretText := filepath.Join(f.TempDir(), "secret"), "FILE-CONTENT"
	writeFile(f, secretFile, []byte(secretText))
	f.Add(base.chat.source[defaultTemplate], []byte(chatFuzzMessages[1]))
	for _, src := range []string{
		"{{ messages[0].content }}",
		"{% for m in messages %}{{ m.role | upper }}{{ m.content | tojson(indent=2) }}{% endfor %}{% if add_generation_prompt %}A:{% endif %}",
		"{%- set ns = namespace(x=1) %}{% set ns.x = ns.x + 1 %}{{ ns.x }}{{ messages|length }}",
		"{{ raise_exception('no') }}", "{{ strftime_now('%Y-%m-%d') }}", "{% if %}", "{{", "{% for %}{% endfor %}",
		"{{ messages[::-1][0]['content'].split('</think>')[-1].lstrip('\\n') }}",
		"{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1) }}", "{{ 1/0 }}", "{{ none.x }}", "{{ [1,2][5] }}",
		"{% include '" + secretFile + "' %}", "{% import '" + secretFile + "' as s %}", "{% extends '" + secretFile + "' %}",
		"{% include 'default' %}", "{% extends 'default' %}{% block b %}{% endblock %}",
	} {
		f.Add(src, []byte(chatFuzzMessages[0]))
	}
	f.Fuzz(func(t *testing.T, src string, messages []byte) {
		tok := *base
		var err error
		if tok.chat, err = newChatTemplates(map[string]string{defaultTemplate: src}); err != nil {
			return
		}
		out, _ := tok.ApplyChatTemplate(ChatRequest{Messages: messages, AddGenerationPrompt: true})
		if strings.Contains(out, secretText) {
			t.Fatalf("template %q read %s", src, secretFile)
		}
	})
}

// TestTemplatePanicIsError: templates on which gonja panics (modulo by
// zero, which FuzzParse found) render to an error, not a crash.
func TestTemplatePanicIsError(t *testing.T) {
	base := load(t, tinyDir)
	for _, src := range []string{
		"{{ 1 % 0 }}",
		"{% for m in messages %}{{ messages % m['role'] }}{% endfor %}",
	} {
		tok := *base
		var err error
		if tok.chat, err = newChatTemplates(map[string]string{defaultTemplate: src}); err != nil {
			t.Fatal(err)
		}
		_, err = tok.ApplyChatTemplate(ChatRequest{Messages: []byte(`[{"role":"user","content":"x"}]`)})
		if err == nil || !strings.Contains(err.Error(), "divide by zero") {
			t.Errorf("%q: error %v, want the panic as an error", src, err)
		}
	}
}
