package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The Llama-3 and Qwen2/3 pre-tokenizer regexes, which differ only in how
// many digits form one piece. They are matched by hand: regexp2 (needed for
// the look-ahead) is an order of magnitude slower than the rest of encoding.
const (
	qwenPattern   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// fastMatcher returns the hand-written matcher for a known pattern, or nil.
func fastMatcher(pattern string) matcher {
	switch pattern {
	case qwenPattern:
		return fastSplit{maxDigits: 1}.find
	case llama3Pattern:
		return fastSplit{maxDigits: 3}.find
	}
	return nil
}

// Rune classes as the pattern sees them; \r and \n are also \s.
const (
	clsOther = iota
	clsLetter
	clsNumber
	clsSpace
	clsNewline
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := range t {
		t[r] = classifySlow(rune(r))
	}
	return t
}()

func classifySlow(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsSpace(r):
		return clsSpace
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	}
	return clsOther
}

// isSpace is \s as regexp2 defines it.
func isSpace(r rune) bool { return unicode.IsSpace(r) }

// runeAt decodes the rune at i with its class; invalid bytes read as a
// one-byte U+FFFD, which is what regexp2 sees for them.
func runeAt(s string, i int) (r rune, w int, cls uint8) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, w = utf8.DecodeRuneInString(s[i:])
	return r, w, classifySlow(r)
}

type fastSplit struct{ maxDigits int }

func (f fastSplit) find(s string, yield func(start, end int)) {
	for i := 0; i < len(s); {
		end := f.matchAt(s, i)
		yield(i, end)
		i = end
	}
}

// run returns the end of the run of runes from i whose class satisfies ok.
func run(s string, i int, ok func(uint8) bool) int {
	for i < len(s) {
		_, w, c := runeAt(s, i)
		if !ok(c) {
			break
		}
		i += w
	}
	return i
}

func isLetter(c uint8) bool     { return c == clsLetter }
func isOther(c uint8) bool      { return c == clsOther }
func isWhite(c uint8) bool      { return c == clsSpace || c == clsNewline }
func isNewlineCls(c uint8) bool { return c == clsNewline }

// matchAt returns the end of the match starting at i, trying the
// alternatives in the regex's order (the first that matches wins).
func (f fastSplit) matchAt(s string, i int) int {
	r, w, c := runeAt(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' && i+1 < len(s) {
		switch s[i+1] | 0x20 {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2]|0x20 == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2]|0x20 == 'l' {
				return i + 3
			}
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return run(s, i+w, isLetter)
	}
	if (c == clsOther || c == clsSpace) && i+w < len(s) {
		if _, _, next := runeAt(s, i+w); next == clsLetter {
			return run(s, i+w, isLetter)
		}
	}
	// \p{N} or \p{N}{1,3}
	if c == clsNumber {
		end := i + w
		for n := 1; n < f.maxDigits && end < len(s); n++ {
			_, w2, c2 := runeAt(s, end)
			if c2 != clsNumber {
				break
			}
			end += w2
		}
		return end
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	start := i
	if r == ' ' && i+1 < len(s) {
		if _, _, next := runeAt(s, i+1); next == clsOther {
			start = i + 1
			c = clsOther
		}
	}
	if c == clsOther {
		return run(s, run(s, start, isOther), isNewlineCls)
	}
	// Whitespace: \s*[\r\n]+ ends after the run's last newline;
	// \s+(?!\S) gives back the run's last rune when a non-space follows;
	// \s+ takes the rest.
	end, lastNewline, lastStart := i, -1, i
	for end < len(s) {
		_, w2, c2 := runeAt(s, end)
		if !isWhite(c2) {
			break
		}
		if c2 == clsNewline {
			lastNewline = end
		}
		lastStart = end
		end += w2
	}
	switch {
	case lastNewline >= 0:
		return lastNewline + 1
	case end < len(s) && lastStart > i:
		return lastStart
	}
	return end
}
