package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestStreamDecoder feeds ids one at a time: every chunk must be complete
// UTF-8 and the chunks together must equal a full Decode.
func TestStreamDecoder(t *testing.T) {
	sp := load(t, spDir)
	qwenTok := qwen(t)
	var texts []string
	for _, e := range readExpectations(t, filepath.Join(qwenDir, "expected.json")).Encode {
		texts = append(texts, e.Text)
	}
	cases := []struct {
		name  string
		tok   *Tokenizer
		texts []string
	}{
		{"qwen3", qwenTok, append(texts, "日本語のテキスト 🤖🚀👩‍👩‍👧", "<|im_start|>assistant\n<think>\nx</think>\n\n答")},
		{"sentencepiece", sp, []string{"hé😀 hello", "<s>hello world</s>", "  x"}},
	}
	for _, c := range cases {
		for _, skip := range []bool{false, true} {
			for _, text := range c.texts {
				ids := c.tok.Encode(text)
				s := c.tok.NewStreamDecoder(skip)
				var b strings.Builder
				for _, id := range ids {
					chunk := s.Add(id)
					if !utf8.ValidString(chunk) || strings.ContainsRune(chunk, utf8.RuneError) {
						t.Fatalf("%s: chunk %q of %q is not complete UTF-8", c.name, chunk, text)
					}
					b.WriteString(chunk)
				}
				b.WriteString(s.Flush())
				if want := c.tok.Decode(ids, skip); b.String() != want {
					t.Errorf("%s skip=%v: streamed %q, Decode %q", c.name, skip, b.String(), want)
				}
			}
		}
	}
}

// TestStreamDecoderHoldsPartialCharacters checks the emission points: a
// 4-byte emoji split over byte tokens appears only with its last byte, and
// Flush releases an unfinished one as U+FFFD.
func TestStreamDecoderHoldsPartialCharacters(t *testing.T) {
	sp := load(t, spDir)
	emoji := []int{spByte0 + 0xF0, spByte0 + 0x9F, spByte0 + 0x98, spByte0 + 0x80}
	s := sp.NewStreamDecoder(false)
	var got []string
	for _, id := range append([]int{spHello}, emoji...) {
		got = append(got, s.Add(id))
	}
	if want := []string{"hello", "", "", "", "😀"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("chunks = %q, want %q", got, want)
	}
	s.Add(spByte0 + 0xF0)
	if got := s.Add(spByte0 + 0x9F); got != "" {
		t.Errorf("partial character emitted early: %q", got)
	}
	if got := s.Flush(); got != "\uFFFD" {
		t.Errorf("Flush = %q, want one U+FFFD", got)
	}
	// A byte that can never start a character is emitted at once.
	if got := s.Add(spByte0 + 0xFF); got != "\uFFFD" {
		t.Errorf("invalid byte: %q, want U+FFFD", got)
	}
}

func TestLossyString(t *testing.T) {
	cases := []struct{ in, want string }{
		{"abc", "abc"},
		{"a\xF0\x9F\x98", "a\uFFFD"},                     // truncated 4-byte sequence: one replacement
		{"\xF0\x9F\x98\x80", "😀"},                        // complete
		{"\xE0\x80\x80", "\uFFFD\uFFFD\uFFFD"},           // overlong: every byte is its own error
		{"\xC3x\xA9", "\uFFFDx\uFFFD"},                   // broken in the middle
		{"\xED\xA0\x80", "\uFFFD\uFFFD\uFFFD"},           // surrogate
		{"\xF4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"}, // beyond U+10FFFF
	}
	for _, c := range cases {
		if got := lossyString([]byte(c.in)); got != c.want {
			t.Errorf("lossyString(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
