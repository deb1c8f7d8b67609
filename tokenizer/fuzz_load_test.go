package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readFile reads a fixture or fails.
func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// FuzzParse feeds arbitrary tokenizer.json, tokenizer_config.json and chat
// template sources to Parse: it returns a tokenizer or an error, never
// panics, and a tokenizer it returns encodes, decodes and renders (or
// refuses to render) without panicking either.
func FuzzParse(f *testing.F) {
	f.Add(readFile(f, filepath.Join(tinyDir, TokenizerFile)), readFile(f, filepath.Join(tinyDir, TokenizerConfigFile)), "")
	f.Add(readFile(f, filepath.Join(spDir, TokenizerFile)), readFile(f, filepath.Join(spDir, TokenizerConfigFile)), "{{ messages[0].content }}")
	minimal := `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},` +
		`"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},"decoder":{"type":"ByteLevel"},` +
		`"added_tokens":[{"id":3,"content":"<s>","special":true,"normalized":false,"lstrip":false,"rstrip":false,"single_word":false}]}`
	f.Add([]byte(minimal), []byte(`{"bos_token":"<s>","eos_token":{"content":"<s>"},"add_bos_token":true,"chat_template":[{"name":"default","template":"{{ bos_token }}"}]}`), "")
	f.Add([]byte(minimal), []byte(`{"chat_template":"{% for m in messages %}{{ m['role'] }}{% endfor %}"}`), "{% if x %}")
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{},"merges":[]},"normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},"decoder":{"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}}`), []byte(nil), "")
	f.Add([]byte(`{}`), []byte(`null`), "")
	msgs := []byte(`[{"role":"system","content":"s"},{"role":"user","content":"Hi <|im_start|> there"},{"role":"assistant","content":"x","reasoning_content":"r"}]`)
	f.Fuzz(func(t *testing.T, tokenizerJSON, configJSON []byte, template string) {
		tok, err := Parse(tokenizerJSON, configJSON, template)
		if err != nil {
			return
		}
		for _, s := range []string{"", "Hello, world! 数学 🤖 <s> \xff", "  \n\t"} {
			ids := tok.Encode(s)
			tok.Decode(ids, false)
			tok.Decode(ids, true)
		}
		tok.Decode([]int{-1, 0, 1 << 30}, false)
		if tok.HasChatTemplate() {
			tok.ApplyChatTemplate(ChatRequest{Messages: msgs, AddGenerationPrompt: true})
		}
	})
}

// TestParseBadIDs: ids that would index out of range or size a table
// absurdly are refused with an error (FuzzParse found the negative one).
func TestParseBadIDs(t *testing.T) {
	for _, tc := range []struct{ name, json string }{
		{"negative vocab id", `{"model":{"type":"BPE","vocab":{"a":-81},"merges":[]}}`},
		{"huge vocab id", `{"model":{"type":"BPE","vocab":{"a":1099511627776},"merges":[]}}`},
		{"negative added id", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"added_tokens":[{"id":-1,"content":"<x>"}]}`},
		{"huge added id", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"added_tokens":[{"id":2147483647,"content":"<x>"}]}`},
	} {
		if _, err := Parse([]byte(tc.json), nil, ""); err == nil || !strings.Contains(err.Error(), "outside") {
			t.Errorf("%s: error %v, want an id outside the range", tc.name, err)
		}
	}
}
