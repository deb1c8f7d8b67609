package tokenizer

import (
	"slices"
	"unicode"
	"unicode/utf8"
)

// addedMatcher finds added tokens in text, leftmost and longest first, as
// HF's aho-corasick (LeftmostLongest) does. Checkpoints may reserve
// thousands of added tokens sharing a prefix such as "<|", so candidates
// are looked up by length (few distinct lengths) rather than compared one
// by one.
type addedMatcher struct {
	byContent map[string]*AddedToken
	lengths   [256][]int // distinct content lengths by first byte, longest first
}

func newAddedMatcher(tokens []*AddedToken) *addedMatcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &addedMatcher{byContent: map[string]*AddedToken{}}
	for _, t := range tokens {
		if t.Content == "" {
			continue
		}
		if _, dup := m.byContent[t.Content]; !dup {
			m.byContent[t.Content] = t
			first := t.Content[0]
			if !slices.Contains(m.lengths[first], len(t.Content)) {
				m.lengths[first] = append(m.lengths[first], len(t.Content))
			}
		}
	}
	for i := range m.lengths {
		slices.SortFunc(m.lengths[i], func(a, b int) int { return b - a })
	}
	return m
}

// split calls text for every stretch between added tokens and added for
// every token found, in order. lstrip/rstrip tokens swallow the whitespace
// beside them.
func (m *addedMatcher) split(s string, text func(start, end int), added func(*AddedToken)) {
	if m == nil {
		if s != "" {
			text(0, len(s))
		}
		return
	}
	prev := 0
	for i := 0; i < len(s); i++ {
		lengths := m.lengths[s[i]]
		if len(lengths) == 0 {
			continue
		}
		tok := m.matchAt(s, i, lengths)
		if tok == nil {
			continue
		}
		start, end := i, i+len(tok.Content)
		if tok.LStrip {
			for start > prev {
				r, w := utf8.DecodeLastRuneInString(s[prev:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= w
			}
		}
		if tok.RStrip {
			for end < len(s) {
				r, w := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += w
			}
		}
		if prev < start {
			text(prev, start)
		}
		added(tok)
		prev = end
		i = end - 1
	}
	if prev < len(s) {
		text(prev, len(s))
	}
}

func (m *addedMatcher) matchAt(s string, i int, lengths []int) *AddedToken {
	for _, n := range lengths {
		end := i + n
		if end > len(s) {
			continue
		}
		t, ok := m.byContent[s[i:end]]
		if !ok || t.SingleWord && (endsWithWordChar(s[:i]) || startsWithWordChar(s[end:])) {
			continue
		}
		return t
	}
	return nil
}

func isWordChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

func endsWithWordChar(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}
