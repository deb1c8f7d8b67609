package data

import (
	"strings"
	"testing"

	"dllm/tokenizer"
)

// BenchmarkEncodeText measures text tokenization per worker on Qwen3's
// tokenizer (bytes/s of raw text).
func BenchmarkEncodeText(b *testing.B) {
	tok, err := tokenizer.Load(qwenTokenizerDir(b))
	if err != nil {
		b.Fatal(err)
	}
	enc := &encoder{tok: tok, bos: -1}
	text := strings.Repeat("The quick brown fox jumps over the lazy dog; numbers like 12345 and code such as f(x) = x**2 appear too. ", 40)
	src := &SourceConfig{Kind: KindText}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		enc.encode(src, rawRecord{value: text})
	}
}

// BenchmarkEncodeChat measures rendering, masking and tokenizing one
// two-turn conversation with reasoning through Qwen3's template.
func BenchmarkEncodeChat(b *testing.B) {
	enc := chatEncoder(b, tiny(b), nil, true)
	src := &SourceConfig{Kind: KindChat}
	for b.Loop() {
		enc.encode(src, rawRecord{value: twoTurns})
	}
}
