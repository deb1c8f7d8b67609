package eval

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// RunFunction runs a one-function program in a small subset of Python, the
// answer format of code tasks, on integer arguments and returns what it
// returns. The subset is what such tasks need and nothing that touches the
// world: a first line `def NAME(PARAMS):`, then indented lines that are
// assignments `NAME = EXPR` or a final `return EXPR`; expressions of
// integers, names, parentheses, unary minus and + - * // % with Python's
// precedence and floor semantics. Anything else is an error, so a reply in
// real Python that strays outside the subset scores as wrong, never runs.
func RunFunction(src string, args ...int64) (int64, error) {
	lines := codeLines(src)
	switch {
	case len(lines) == 0:
		return 0, errors.New("program: empty")
	case len(lines) > maxProgramLines:
		return 0, fmt.Errorf("program: more than %d lines", maxProgramLines)
	}
	m := defRE.FindStringSubmatch(lines[0].text)
	if m == nil || lines[0].indent != 0 {
		return 0, fmt.Errorf("program: line 1 %q is not `def NAME(PARAMS):`", lines[0].text)
	}
	var params []string
	if p := strings.TrimSpace(m[2]); p != "" {
		for _, name := range strings.Split(p, ",") {
			name = strings.TrimSpace(name)
			if !isName(name) {
				return 0, fmt.Errorf("program: parameter %q is not a name", name)
			}
			params = append(params, name)
		}
	}
	if len(params) != len(args) {
		return 0, fmt.Errorf("program: %s takes %d arguments, called with %d", m[1], len(params), len(args))
	}
	env := map[string]int64{}
	for i, p := range params {
		if err := checkRange(args[i]); err != nil {
			return 0, err
		}
		env[p] = args[i]
	}
	for _, l := range lines[1:] {
		if l.indent == 0 {
			return 0, fmt.Errorf("program: line %q is outside the function", l.text)
		}
		if rest, ok := strings.CutPrefix(l.text, "return "); ok {
			return evalExpr(rest, env)
		}
		name, expr, ok := strings.Cut(l.text, "=")
		name = strings.TrimSpace(name)
		if !ok || !isName(name) || strings.HasPrefix(expr, "=") {
			return 0, fmt.Errorf("program: line %q is neither `NAME = EXPR` nor `return EXPR`", l.text)
		}
		v, err := evalExpr(expr, env)
		if err != nil {
			return 0, err
		}
		env[name] = v
	}
	return 0, errors.New("program: the function never returns")
}

var defRE = regexp.MustCompile(`^def\s+([A-Za-z_]\w*)\s*\(([^)]*)\)\s*:$`)

// codeLine is a non-blank line without its comment, and its indentation.
type codeLine struct {
	indent int
	text   string
}

// maxProgramLines bounds a program: code tasks need a handful.
const maxProgramLines = 200

func codeLines(src string) []codeLine {
	var out []codeLine
	for _, raw := range strings.Split(src, "\n") {
		if i := strings.IndexByte(raw, '#'); i >= 0 {
			raw = raw[:i]
		}
		text := strings.TrimSpace(raw)
		if text == "" {
			continue
		}
		out = append(out, codeLine{indent: len(raw) - len(strings.TrimLeft(raw, " \t")), text: text})
		if len(out) > maxProgramLines {
			break
		}
	}
	return out
}

// isName reports whether s is an ASCII identifier other than a keyword.
func isName(s string) bool {
	if s == "" || s == "def" || s == "return" {
		return false
	}
	for i, c := range []byte(s) {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// valueLimit bounds every value, so that no program overflows int64.
const valueLimit = 1 << 50

// exprParser is a recursive-descent parser that evaluates as it goes.
type exprParser struct {
	toks []string
	pos  int
	env  map[string]int64
}

func evalExpr(s string, env map[string]int64) (int64, error) {
	toks, err := tokenizeExpr(s)
	if err != nil {
		return 0, err
	}
	p := &exprParser{toks: toks, env: env}
	v, err := p.sum()
	if err == nil && p.pos < len(p.toks) {
		err = fmt.Errorf("program: unexpected %q in %q", p.toks[p.pos], strings.TrimSpace(s))
	}
	return v, err
}

func tokenizeExpr(s string) ([]string, error) {
	var toks []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '/' && i+1 < len(s) && s[i+1] == '/':
			toks = append(toks, "//")
			i += 2
		case strings.IndexByte("+-*%()", c) >= 0:
			if c == '*' && i+1 < len(s) && s[i+1] == '*' {
				return nil, errors.New("program: ** is not supported")
			}
			toks = append(toks, string(c))
			i++
		case isWordByte(c):
			j := i
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		default:
			return nil, fmt.Errorf("program: %q is not supported", string(c))
		}
	}
	return toks, nil
}

// isWordByte is a byte of a number or a name.
func isWordByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func (p *exprParser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

// sum is term (("+" | "-") term)*.
func (p *exprParser) sum() (int64, error) {
	v, err := p.term()
	for err == nil && (p.peek() == "+" || p.peek() == "-") {
		op := p.toks[p.pos]
		p.pos++
		var w int64
		if w, err = p.term(); err == nil {
			if op == "+" {
				v += w
			} else {
				v -= w
			}
			err = checkRange(v)
		}
	}
	return v, err
}

// term is unary (("*" | "//" | "%") unary)*.
func (p *exprParser) term() (int64, error) {
	v, err := p.unary()
	for err == nil && (p.peek() == "*" || p.peek() == "//" || p.peek() == "%") {
		op := p.toks[p.pos]
		p.pos++
		var w int64
		if w, err = p.unary(); err != nil {
			break
		}
		switch {
		case op == "*":
			if w != 0 && (v > valueLimit/abs(w) || v < -valueLimit/abs(w)) {
				return 0, errors.New("program: a value is too large")
			}
			v *= w
		case w == 0:
			return 0, errors.New("program: division by zero")
		case op == "//":
			v = floorDiv(v, w)
		default:
			v -= floorDiv(v, w) * w
		}
	}
	return v, err
}

// unary is "-" unary | atom.
func (p *exprParser) unary() (int64, error) {
	if p.peek() == "-" {
		p.pos++
		v, err := p.unary()
		return -v, err
	}
	if p.peek() == "+" {
		p.pos++
		return p.unary()
	}
	return p.atom()
}

// atom is an integer, a name or a parenthesised sum.
func (p *exprParser) atom() (int64, error) {
	t := p.peek()
	p.pos++
	switch {
	case t == "":
		return 0, errors.New("program: an expression ends too soon")
	case t == "(":
		v, err := p.sum()
		if err != nil {
			return 0, err
		}
		if p.peek() != ")" {
			return 0, errors.New("program: ( without )")
		}
		p.pos++
		return v, nil
	case t[0] >= '0' && t[0] <= '9':
		v, err := strconv.ParseInt(t, 10, 64)
		if err != nil || checkRange(v) != nil {
			return 0, fmt.Errorf("program: %q is not a number dllm runs", t)
		}
		return v, nil
	case isName(t):
		v, ok := p.env[t]
		if !ok {
			return 0, fmt.Errorf("program: %s is not defined", t)
		}
		return v, nil
	}
	return 0, fmt.Errorf("program: unexpected %q", t)
}

func checkRange(v int64) error {
	if v > valueLimit || v < -valueLimit {
		return errors.New("program: a value is too large")
	}
	return nil
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// floorDiv is Python's //: the quotient rounded down.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// fenceRE finds fenced code blocks, with or without a language tag.
var fenceRE = regexp.MustCompile("(?s)```[A-Za-z0-9_+-]*\n(.*?)```")

// extractProgram is the last fenced code block of content, else the
// content from its first `def ` on.
func extractProgram(content string) (string, bool) {
	if m := fenceRE.FindAllStringSubmatch(content, -1); len(m) > 0 {
		code := strings.TrimSpace(m[len(m)-1][1])
		return code, code != ""
	}
	if i := strings.Index(content, "def "); i >= 0 {
		return strings.TrimSpace(content[i:]), true
	}
	return "", false
}

// programInputs are the arguments a program answer is run on.
var programInputs = []int64{0, 1, 2, 3, 5, 7, 10, -4}

// sameFunction reports whether got and want, one-argument functions,
// return the same on every programInputs.
func sameFunction(got, want string) bool {
	for _, x := range programInputs {
		w, err := RunFunction(want, x)
		if err != nil {
			return false
		}
		g, err := RunFunction(got, x)
		if err != nil || g != w {
			return false
		}
	}
	return true
}
