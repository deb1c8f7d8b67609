package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// matcher reports the non-overlapping matches of a pattern in s, in order,
// as byte ranges.
type matcher func(s string, yield func(start, end int))

// compilePattern builds the matcher for a Split pattern, preferring the
// hand-written one for the Llama-3/Qwen regex because regexp2 is slow.
func compilePattern(p patternJSON) (matcher, error) {
	switch {
	case p.String != nil:
		return literalMatcher(*p.String), nil
	case p.Regex != nil:
		if m := fastMatcher(*p.Regex); m != nil {
			return m, nil
		}
		re, err := regexp2.Compile(*p.Regex, regexp2.None)
		if err != nil {
			return nil, fmt.Errorf("split pattern %q: %w", *p.Regex, err)
		}
		return regexMatcher(re), nil
	}
	return nil, fmt.Errorf("split pattern has neither String nor Regex")
}

func literalMatcher(lit string) matcher {
	return func(s string, yield func(int, int)) {
		if lit == "" {
			return
		}
		for off := 0; ; {
			i := strings.Index(s[off:], lit)
			if i < 0 {
				return
			}
			yield(off+i, off+i+len(lit))
			off += i + len(lit)
		}
	}
}

// digitMatcher matches every numeric rune on its own, as HF's Digits
// pre-tokenizer does before its Isolated/Contiguous grouping.
func digitMatcher(s string, yield func(int, int)) {
	for i, r := range s {
		if unicode.IsNumber(r) {
			yield(i, i+utf8.RuneLen(r))
		}
	}
}

// regexMatcher adapts regexp2, whose match positions count runes, to byte
// offsets. Go's []rune conversion turns each invalid byte into one rune,
// exactly as utf8.DecodeRuneInString steps over it, so the walk stays in
// sync.
func regexMatcher(re *regexp2.Regexp) matcher {
	return func(s string, yield func(int, int)) {
		bytePos, runePos := 0, 0
		advance := func(target int) int {
			for runePos < target {
				_, w := utf8.DecodeRuneInString(s[bytePos:])
				bytePos += w
				runePos++
			}
			return bytePos
		}
		m, err := re.FindStringMatch(s)
		for m != nil && err == nil {
			start := advance(m.Index)
			end := advance(m.Index + m.Length)
			yield(start, end)
			m, err = re.FindNextMatch(m)
		}
	}
}

func knownBehavior(b string) bool {
	switch b {
	case "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous":
		return true
	}
	return false
}

// span is a piece of a split stretch and whether the pattern matched it.
type span struct {
	start, end int
	match      bool
}

// splitPreTokenizer reproduces HF's Split with its five behaviours.
func splitPreTokenizer(m matcher, behavior string, invert bool) preTokenizer {
	return func(s string, atStart bool, emit func(string, bool)) {
		first := atStart
		out := func(start, end int) {
			if start < end {
				emit(s[start:end], first && start == 0)
			}
		}
		if behavior == "Isolated" {
			// Every piece is emitted as is, so no span list is needed:
			// this is the hot path for byte-level tokenizers.
			prev := 0
			m(s, func(start, end int) {
				out(prev, start)
				out(start, end)
				prev = end
			})
			out(prev, len(s))
			return
		}
		var spans []span
		prev := 0
		m(s, func(start, end int) {
			if prev < start {
				spans = append(spans, span{prev, start, invert})
			}
			if start < end {
				spans = append(spans, span{start, end, !invert})
			}
			prev = end
		})
		if prev < len(s) {
			spans = append(spans, span{prev, len(s), invert})
		}
		for _, sp := range groupSpans(spans, behavior) {
			out(sp.start, sp.end)
		}
	}
}

// groupSpans applies a non-Isolated Split behaviour, following HF's
// folding rules (a match only merges into a neighbouring non-match).
func groupSpans(spans []span, behavior string) []span {
	var acc []span
	switch behavior {
	case "Removed":
		for _, sp := range spans {
			if !sp.match {
				acc = append(acc, sp)
			}
		}
	case "MergedWithPrevious":
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(acc) > 0 {
				acc[len(acc)-1].end = sp.end
			} else {
				acc = append(acc, sp)
			}
			prevMatch = sp.match
		}
	case "MergedWithNext":
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(acc) > 0 {
				acc[len(acc)-1].start = sp.start
			} else {
				acc = append(acc, sp)
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(acc)-1; i < j; i, j = i+1, j-1 {
			acc[i], acc[j] = acc[j], acc[i]
		}
	case "Contiguous":
		prevMatch := false
		for _, sp := range spans {
			if sp.match == prevMatch && len(acc) > 0 {
				acc[len(acc)-1].end = sp.end
			} else {
				acc = append(acc, sp)
			}
			prevMatch = sp.match
		}
	}
	return acc
}
