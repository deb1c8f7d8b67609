package serve

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitter(t *testing.T) {
	for _, tc := range []struct {
		name               string
		inThink            bool
		text               string
		reasoning, content string
	}{
		{"plain", false, "Hello.", "", "Hello."},
		{"leading space kept without think", false, "  Hi", "", "  Hi"},
		{"think", false, "<think>\nA\nB\n</think>\n\nC", "A\nB", "C"},
		{"think after whitespace", false, "\n<think>x</think>y", "x", "y"},
		{"open in prompt", true, "\nA\n\n</think>\n\nC\n", "A", "C\n"},
		{"empty think", false, "<think>\n\n</think>\n\nC", "", "C"},
		{"unfinished", false, "<think>\nA\n\n", "A", ""},
		{"tag-like text", false, "<thin>k", "", "<thin>k"},
		{"only whitespace", false, " \n", "", " \n"},
		{"lone <", false, "<", "", "<"},
		{"close only inside think", true, "a</thi", "a</thi", ""},
		{"second think is content", false, "<think>a</think>b<think>c", "a", "b<think>c"},
		{"inner newlines kept", true, "a\n\nb\n</think>c", "a\n\nb", "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Every way of cutting the text in two gives the same split as
			// the whole text, and so does byte-by-byte.
			check := func(pieces []string) {
				t.Helper()
				sp := newSplitter(tc.inThink)
				var r, c strings.Builder
				for _, p := range pieces {
					a, b := sp.write(p, false)
					r.WriteString(a)
					c.WriteString(b)
				}
				a, b := sp.write("", true)
				r.WriteString(a)
				c.WriteString(b)
				if r.String() != tc.reasoning || c.String() != tc.content {
					t.Errorf("pieces %q: reasoning %q content %q, want %q %q", pieces, r.String(), c.String(), tc.reasoning, tc.content)
				}
			}
			check([]string{tc.text})
			for i := 0; i <= len(tc.text); i++ {
				check([]string{tc.text[:i], tc.text[i:]})
			}
			check(strings.Split(tc.text, ""))
		})
	}
}

func TestPromptOpensThink(t *testing.T) {
	for _, tc := range []struct {
		prompt string
		want   bool
	}{
		{"<|im_start|>assistant\n", false},
		{"<|im_start|>assistant\n<think>\n", true},
		{"<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
		{"<think>a</think> old turn <|im_start|>assistant\n<think>", true},
	} {
		if got := promptOpensThink(tc.prompt); got != tc.want {
			t.Errorf("%q: %v", tc.prompt, got)
		}
	}
}

// TestTextStreamHoldBack: streamed text never runs past a stop string and
// never splits a character, however the ids are grouped.
func TestTextStreamHoldBack(t *testing.T) {
	tok := tinyTokenizer(t)
	keep := func(int) bool { return true }
	for _, tc := range []struct {
		text  string
		stops []string
		want  string
	}{
		{"abc STOP def", []string{"STOP"}, "abc "},
		{"abc STOP def", nil, "abc STOP def"},
		{"héllo wörld 😀 end", []string{"end"}, "héllo wörld 😀 "},
		{"aaa", []string{"aaaa"}, "aaa"},
		{"x</s>y", []string{"</s>", "y"}, "x"},
	} {
		ids := toInt64(tok.Encode(tc.text))
		for size := 1; size <= 3; size++ {
			ts := newTextStream(tok, keep, tc.stops)
			var got strings.Builder
			for i := 0; i < len(ids); i += size {
				delta, stopped := ts.add(ids[i:min(i+size, len(ids))])
				if !utf8.ValidString(delta) || strings.ContainsRune(delta, utf8.RuneError) {
					t.Errorf("%q: broken UTF-8 in %q", tc.text, delta)
				}
				got.WriteString(delta)
				if !strings.HasPrefix(tc.want, got.String()) {
					t.Fatalf("%q size %d: sent %q, beyond %q", tc.text, size, got.String(), tc.want)
				}
				if stopped {
					break
				}
			}
			delta, _ := ts.finish()
			got.WriteString(delta)
			if got.String() != tc.want || ts.String() != tc.want {
				t.Errorf("%q size %d: %q (String %q), want %q", tc.text, size, got.String(), ts.String(), tc.want)
			}
		}
	}
}

func TestKeepToken(t *testing.T) {
	m := &Model{Tokenizer: tinyTokenizer(t)}
	for id, want := range map[int]bool{0: false, 1: false, 2: false, 3: true, 4: true, 100: true} {
		if got := m.keepToken(id); got != want {
			t.Errorf("keepToken(%d) = %v", id, got)
		}
	}
}
