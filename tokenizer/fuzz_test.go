package tokenizer

import (
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// fuzzSeeds exercise the pre-tokenizer regex's corners: contractions in
// both cases, letters after punctuation, digit runs (ASCII and not), each
// kind of whitespace run, combining marks, CJK, emoji, added tokens and
// invalid UTF-8.
var fuzzSeeds = []string{
	"", "Hello, world!", "I'm you're it's we'll I'D 'S 'Ll 'x", "a'sb ''s '",
	"1234567890 3.14159 -42 1e-6 ١٢٣ ⅷ ½", "def f(x):\n    return x**2  # square\n",
	"tabs\tand\nnewlines\r\n\n\nmany", "  leading spaces and trailing   ", " \t\n \u3000a\u00a0b\u2028",
	"x\u0301 e\u0301 ﬁ Å", "数学题：计算 12 × 34 = ?", "emoji 🤖🚀👩‍👩‍👧 done", "!!!\n\n??", " ?!\r\n",
	"<|im_start|>user\nhi<|im_end|>\n<think>\n</think>", "\xff\xfe a\xc3", "ſ'ſ 'ſ", "\n \n", "a \n", " ",
}

func FuzzFastSplitMatchesRegexp2(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	type pair struct{ fast, slow matcher }
	var pairs []pair
	for _, p := range []string{qwenPattern, llama3Pattern} {
		pairs = append(pairs, pair{fastMatcher(p), regexMatcher(regexp2.MustCompile(p, regexp2.None))})
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i, p := range pairs {
			fast, slow := spans(p.fast, s), spans(p.slow, s)
			if len(fast) != len(slow) {
				t.Fatalf("pattern %d on %q: fast %v, regexp2 %v", i, s, fast, slow)
			}
			for j := range fast {
				if fast[j] != slow[j] {
					t.Fatalf("pattern %d on %q: fast %v, regexp2 %v", i, s, fast, slow)
				}
			}
		}
	})
}

func spans(m matcher, s string) [][2]int {
	var out [][2]int
	m(s, func(start, end int) { out = append(out, [2]int{start, end}) })
	return out
}

// FuzzRoundTrip: byte-level tokenizers lose nothing but normalization, and
// no tokenizer panics on any input.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	byteLevel := []*Tokenizer{qwen(f), load(f, tinyDir)}
	sp := load(f, spDir)
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range byteLevel {
			ids := tok.Encode(s)
			got := tok.Decode(ids, false)
			if utf8.ValidString(s) && got != norm.NFC.String(s) {
				t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
			}
		}
		sp.Decode(sp.Encode(s), true)
	})
}
