package eval

import (
	"regexp"
	"strings"
)

// answerRE finds "Answer: X" (any case, optional markdown bold); X is the
// rest of the line.
var answerRE = regexp.MustCompile(`(?i)\**answer\**\s*[:：]\s*\**\s*([^\n]*)`)

// Extract returns the final answer of a reply: the last "Answer: X" in
// content, else the last one in the reasoning, else the whole content when
// it is nothing but a number or a choice letter (a model that answers with
// just the value).
func Extract(content, reasoning string) (string, bool) {
	if a, ok := lastAnswer(content); ok {
		return a, true
	}
	if a, ok := lastAnswer(reasoning); ok {
		return a, true
	}
	c := strings.TrimSpace(content)
	if _, ok := NormalizeNumber(c); ok {
		return c, true
	}
	if _, ok := letterOf(c); ok && len(c) <= 3 {
		return c, true
	}
	return "", false
}

func lastAnswer(s string) (string, bool) {
	m := answerRE.FindAllStringSubmatch(s, -1)
	if len(m) == 0 {
		return "", false
	}
	a := strings.TrimSpace(strings.TrimRight(m[len(m)-1][1], "*"))
	return a, a != ""
}

// ExtractFor is Extract for the item's format: a program answer is the
// reply's last fenced code block; a math answer the last \boxed{} of the
// content, else of the reasoning (as Qwen2.5-Math's evaluation reads
// them), else an "Answer: X".
func ExtractFor(it *Item, content, reasoning string) (string, bool) {
	switch it.Format {
	case FormatProgram:
		return extractProgram(content)
	case FormatTests:
		return extractLCBCode(content)
	case FormatMath:
		if a, ok := ExtractBoxed(content); ok {
			return a, true
		}
		if a, ok := ExtractBoxed(reasoning); ok {
			return a, true
		}
	}
	if len(it.Choices) > 0 {
		return extractChoice(content, reasoning, len(it.Choices))
	}
	return Extract(content, reasoning)
}

// The fallbacks of MMLU-Pro's evaluate_from_local.py: "the answer is (X)"
// (its first), then the last letter standing alone.
var (
	answerIsRE   = regexp.MustCompile(`answer is \(?([A-Z])\)?`)
	loneLetterRE = regexp.MustCompile(`\b[A-Z]\b`)
)

// extractChoice reads a multiple-choice reply's letter among n choices:
// simple-evals' last "Answer: X" (content, then reasoning), else
// MMLU-Pro's "answer is (X)", else its last resort, the last capital letter
// standing alone (in the content, else the reasoning). A letter beyond the
// choices is no answer.
func extractChoice(content, reasoning string, n int) (string, bool) {
	valid := func(s string) (string, bool) {
		if l, ok := letterOf(s); ok && int(l-'A') < n {
			return string(l), true
		}
		return "", false
	}
	for _, s := range []string{content, reasoning} {
		if a, ok := lastAnswer(s); ok {
			if l, ok := valid(a); ok {
				return l, true
			}
		}
	}
	text := content
	if strings.TrimSpace(text) == "" {
		text = reasoning
	}
	if m := answerIsRE.FindStringSubmatch(text); m != nil {
		if l, ok := valid(m[1]); ok {
			return l, true
		}
	}
	letters := loneLetterRE.FindAllString(text, -1)
	for i := len(letters) - 1; i >= 0; i-- {
		if l, ok := valid(letters[i]); ok {
			return l, true
		}
	}
	return "", false
}

// Correct says whether got (an extracted answer) matches the item: by
// letter for multiple choice, as a list of numbers or by running a program
// when the item's format says so, as a number when the expected answer is
// one, else as trimmed text. A "tests" item needs its Sandbox (Run asks
// it); here it is never correct.
func Correct(it *Item, got string) bool {
	switch it.Format {
	case FormatList:
		return sameList(got, it.Answer)
	case FormatProgram:
		return sameFunction(got, it.Answer)
	case FormatMath:
		return MathEqual(got, it.Answer)
	case FormatTests:
		return false
	}
	if len(it.Choices) > 0 {
		g, ok1 := letterOf(got)
		w, ok2 := letterOf(it.Answer)
		return ok1 && ok2 && g == w
	}
	if w, ok := NormalizeNumber(it.Answer); ok {
		g, ok := NormalizeNumber(firstToken(got))
		return ok && g == w
	}
	return strings.EqualFold(strings.TrimSpace(got), strings.TrimSpace(it.Answer))
}

// firstToken is got up to its first space, after stripping trailing
// sentence punctuation, so "1234." and "1234 (carry 1)" read as 1234.
func firstToken(got string) string {
	got = strings.TrimSpace(got)
	if i := strings.IndexAny(got, " \t"); i >= 0 {
		got = got[:i]
	}
	return strings.TrimRight(got, ".,;")
}

// NormalizeNumber spells an integer or decimal canonically: no sign for
// zero, no "+", no thousands separators, no leading zeros, no trailing
// fractional zeros ("1,234.50" -> "1234.5", "-0" -> "0", "007" -> "7").
func NormalizeNumber(s string) (string, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "$")
	neg := false
	switch {
	case strings.HasPrefix(s, "-"), strings.HasPrefix(s, "−"):
		neg = true
		s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "−")
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	s = strings.ReplaceAll(s, ",", "")
	s = strings.ReplaceAll(s, "_", "")
	intPart, frac, hasFrac := strings.Cut(s, ".")
	if intPart == "" && (!hasFrac || frac == "") {
		return "", false
	}
	for _, part := range []string{intPart, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				return "", false
			}
		}
	}
	intPart = strings.TrimLeft(intPart, "0")
	if intPart == "" {
		intPart = "0"
	}
	frac = strings.TrimRight(frac, "0")
	out := intPart
	if frac != "" {
		out += "." + frac
	}
	if neg && out != "0" {
		out = "-" + out
	}
	return out, true
}

// letterOf reads a choice letter from "C", "C)", "(C)", "C. 47", "c",
// "$C$", "\boxed{C}", "\textbf{C}"; anything else is no letter.
func letterOf(s string) (byte, bool) {
	s = strings.TrimLeft(strings.TrimSpace(s), "(*[$ ")
	for _, p := range []string{`\boxed{`, `\text{`, `\textbf{`, `\mathbf{`, `\mathrm{`} {
		s = strings.TrimPrefix(s, p)
	}
	if s == "" {
		return 0, false
	}
	c := s[0]
	if c >= 'a' && c <= 'z' {
		c -= 'a' - 'A'
	}
	if c < 'A' || c > 'Z' {
		return 0, false
	}
	if len(s) > 1 {
		n := s[1]
		if n >= 'a' && n <= 'z' || n >= 'A' && n <= 'Z' || n >= '0' && n <= '9' {
			return 0, false // a word, not a letter
		}
	}
	return c, true
}

// sameList compares two comma-separated lists of numbers element by
// element ("7, 19, 42" = "7,19,42."); a list with anything else is wrong.
func sameList(got, want string) bool {
	g, w := strings.Split(strings.TrimRight(strings.TrimSpace(got), "."), ","), strings.Split(want, ",")
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		a, ok1 := NormalizeNumber(g[i])
		b, ok2 := NormalizeNumber(w[i])
		if !ok1 || !ok2 || a != b {
			return false
		}
	}
	return true
}
