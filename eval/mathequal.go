package eval

// MATH-benchmark answer grading: ExtractBoxed finds a model's final answer
// and MathEqual decides whether it equals the reference, in the spirit of
// Qwen2.5-Math's math_equal/strip_string and HuggingFace Math-Verify, but
// without a computer-algebra system: answers are normalised as LaTeX text,
// split into structures (tuples, intervals, sets, matrices, equations), and
// their scalar parts are evaluated to float64 — at one point when they are
// constants, at several fixed pseudo-random points when they have
// variables.

import (
	"math"
	"regexp"
	"strconv"
	"strings"
)

const (
	// maxAnswerLen bounds the work per answer: final answers are short, and
	// longer inputs (a whole reply passed by mistake) only get an exact
	// comparison, so grading stays fast on any input.
	maxAnswerLen = 512
	// maxDepth bounds nesting in the structure and expression parsers, so
	// recursion stays shallow whatever the input.
	maxDepth = 48
	// numPoints is how many sample points an expression with variables is
	// evaluated at; positivePoints of them give every variable a positive
	// value (so \sqrt{x} and \ln x are defined there), the rest mix signs
	// (so \sqrt{x^2} and x differ).
	numPoints      = 10
	positivePoints = 5
	// minPoints is how many points must be defined on both sides before two
	// expressions with variables are called equal.
	minPoints = 3
	// relTol is Qwen's isclose(rel_tol=1e-4) for numbers; symTol is tighter
	// because two equal expressions evaluate to equal floats up to rounding.
	relTol = 1e-4
	symTol = 1e-7
	// absTol absorbs rounding noise around zero (\sin\pi is 1e-16, not 0).
	absTol = 1e-9
)

// ExtractBoxed returns the content of the last \boxed{...} (or \fbox{...})
// in s, braces balanced and nested braces allowed, or the token after a
// brace-less "\boxed 5" (up to the next '$' or space). "Last" is by where
// the box starts, so a box inside a box wins, as with Qwen's split on
// "boxed". It reports false when s has no complete box.
func ExtractBoxed(s string) (string, bool) {
	type open struct{ brace, box int } // box: where \boxed starts, or -1
	var stack []open
	best, out := -1, ""
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			n := boxCommandLen(s[i:])
			if n == 0 {
				i++ // skip the escaped byte, so \{ and \} are not braces
				continue
			}
			j := skipBlanks(s, i+n)
			if j < len(s) && s[j] == '{' {
				stack = append(stack, open{j, i})
				i = j
				continue
			}
			if tok := bareToken(s[j:]); tok != "" && i > best {
				best, out = i, tok
			}
			i += n - 1
		case '{':
			stack = append(stack, open{i, -1})
		case '}':
			if len(stack) == 0 {
				continue
			}
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if top.box > best {
				best, out = top.box, strings.TrimSpace(s[top.brace+1:i])
			}
		}
	}
	return out, best >= 0
}

// boxCommandLen is the length of a \boxed or \fbox command at the start of
// s, or 0; "\boxedx" is another command, not a box.
func boxCommandLen(s string) int {
	for _, c := range []string{`\boxed`, `\fbox`} {
		if strings.HasPrefix(s, c) && (len(s) == len(c) || !isASCIILetter(s[len(c)])) {
			return len(c)
		}
	}
	return 0
}

// bareToken is the argument of a brace-less \boxed: TeX would take one
// token, but models write "\boxed 12" meaning the whole number.
func bareToken(s string) string {
	end := strings.IndexAny(s, "$ \t\n\r}")
	if end < 0 {
		end = len(s)
	}
	return s[:end]
}

func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// MathEqual says whether got, a model's extracted final answer, is
// mathematically equal to want, the reference answer. It never panics and
// is deterministic; it errs towards "unequal" when unsure, except where the
// reference graders it follows are deliberately lenient (relative
// tolerance 1e-4 for non-integers, percentages).
func MathEqual(got, want string) bool {
	if len(got) > maxAnswerLen || len(want) > maxAnswerLen {
		g, w := strings.TrimSpace(got), strings.TrimSpace(want)
		return g != "" && g == w
	}
	g, gotPct := normalizeMath(got)
	w, wantPct := normalizeMath(want)
	if g == "" || w == "" {
		return false
	}
	if strings.EqualFold(g, w) {
		return true
	}
	if wl, ok := choiceLetter(w); ok {
		if gl, ok := choiceLetter(g); ok {
			return gl == wl
		}
	}
	return equalAnswers(parseAnswer(g, 0), parseAnswer(w, 0), gotPct || wantPct)
}

var choiceRE = regexp.MustCompile(`^\(?([A-Ea-e])\)?$`)

// choiceLetter reads a multiple-choice answer, "C" or "(C)", upper-cased.
func choiceLetter(s string) (byte, bool) {
	m := choiceRE.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	return m[1][0] &^ 0x20, true
}

// ---------------------------------------------------------------------
// Normalisation: LaTeX text to a canonical string, as strip_string does.

// normalize returns s's canonical form and whether it carried a percent
// sign (which lets the number also match value/100 and value*100).
func normalizeMath(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if b, ok := ExtractBoxed(s); ok {
		s = b
	}
	s = unicodeReplacer.Replace(s)
	s = dropSpacing(s)
	s = latexReplacer.Replace(s)
	s = arrayBeginRE.ReplaceAllString(s, `\begin{pmatrix}`)
	s = dropDelimiterSizing(s)
	pct := strings.Contains(s, "%")
	s = strings.ReplaceAll(strings.ReplaceAll(s, `\%`, ""), "%", "")
	s, textPct := unwrapText(s)
	s, unitPct := dropUnitWords(s)
	s = collapseSpaces(s)
	s = strings.TrimRight(s, ".")
	s = dropMembership(s)
	s = braceArgs(s, 0)
	s = leadingDotRE.ReplaceAllString(s, "${1}0.${2}")
	if thousandsRE.MatchString(s) {
		s = strings.ReplaceAll(s, ",", "")
	}
	s = spellInfinity(s)
	switch s {
	case "{}", `\{\}`, `\varnothing`:
		s = `\emptyset`
	}
	return s, pct || textPct || unitPct
}

// unicodeReplacer maps the Unicode forms models print to LaTeX; a command
// gets a trailing space so "πr" does not become "\pir".
var unicodeReplacer = strings.NewReplacer(
	"−", "-", "–", "-", "×", `\times `, "·", `\cdot `, "÷", `\div `,
	"∞", `\infty `, "π", `\pi `, "√", `\sqrt `, "°", "", "≤", `\le `,
	"≥", `\ge `, "≠", `\ne `, "∈", `\in `, "∪", `\cup `, "∅", `\emptyset `,
	"\u00a0", " ", "，", ",", "\n", " ", "\t", " ", "\r", " ", "~", " ",
)

// latexReplacer holds the purely textual rewrites of strip_string.
var latexReplacer = strings.NewReplacer(
	`\dfrac`, `\frac`, `\tfrac`, `\frac`, `\cfrac`, `\frac`,
	`\displaystyle`, "", `\textstyle`, "",
	`^{\circ}`, "", `^\circ`, "", `\degree`, "",
	"{,}", "", `\$`, "", "$", "",
	`\neq`, `\ne`, `\leq`, `\le`, `\geq`, `\ge`, `\leqslant`, `\le`, `\geqslant`, `\ge`,
	"bmatrix", "pmatrix", `\end{array}`, `\end{pmatrix}`, `\mathbb{R}`, `(-\infty,\infty)`,
	`\varnothing`, `\emptyset`,
)

// dropSpacing removes thin spaces (\! \, \; \: \ ) and math delimiters
// (\( \) \[ \]) while keeping \\ (matrix rows) and \{ \} (sets) intact, which
// a plain replacer could not tell apart from "\\ " or "\\,".
func dropSpacing(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '!', ',', ';', ':', ' ', '(', ')', '[', ']':
			if s[i+1] == ' ' {
				b.WriteByte(' ')
			}
		default:
			b.WriteString(s[i : i+2])
		}
		i++
	}
	return b.String()
}

// sizingCommands only resize or space things; "\left(" means "(".
var sizingCommands = []string{
	`\left`, `\right`, `\bigl`, `\bigr`, `\Bigl`, `\Bigr`, `\big`, `\Big`,
	`\quad`, `\qquad`,
}

// dropDelimiterSizing removes sizingCommands where they are whole commands
// (not the start of \rightarrow), and the invisible "." of \left. / \right.
func dropDelimiterSizing(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		n := sizingLen(s[i:])
		if n == 0 {
			b.WriteByte(s[i])
			i++
			continue
		}
		i += n
		if i < len(s) && s[i] == '.' && !strings.HasPrefix(s[i-n:], `\q`) {
			i++
		}
	}
	return b.String()
}

func sizingLen(s string) int { return commandLen(s, sizingCommands) }

// textCommands wrap words; their content is kept unless it is a unit.
var textCommands = []string{
	`\textbf`, `\textit`, `\textrm`, `\textsf`, `\textnormal`, `\text`,
	`\mbox`, `\mathrm`, `\mathbf`, `\mathit`, `\mathsf`, `\operatorname`,
	`\boldsymbol`,
}

// unwrapText replaces \text{...} and friends by their content, except that
// words after a number ("5\text{ cm}", "3\mbox{ in}^2") are a unit and
// dropped. Nested wrappers are peeled a few rounds deep. It also reports a
// dropped "percent".
func unwrapText(s string) (string, bool) {
	pct := false
	for round := 0; round < 4 && strings.Contains(s, `\`); round++ {
		next, p := unwrapTextOnce(s)
		pct = pct || p
		if next == s {
			break
		}
		s = next
	}
	return s, pct
}

func unwrapTextOnce(s string) (string, bool) {
	var b strings.Builder
	pct := false
	for i := 0; i < len(s); {
		n := textCommandLen(s[i:])
		j := skipBlanks(s, i+n)
		if n == 0 || j >= len(s) || s[j] != '{' {
			b.WriteByte(s[i])
			i++
			continue
		}
		end := braceEnd(s, j)
		if end < 0 {
			b.WriteString(s[i:])
			break
		}
		content := s[j+1 : end-1]
		after := skipExponent(s, end)
		if isUnitText(content) && followsNumber(b.String()) && endsAnswerPart(s[after:]) {
			pct = pct || strings.Contains(strings.ToLower(content), "percent")
			i = after
			continue
		}
		b.WriteString(content)
		i = end
	}
	return b.String(), pct
}

func textCommandLen(s string) int { return commandLen(s, textCommands) }

// commandLen is the length of the command of cmds that s starts with (a
// whole command name: \text is not \textbf), else 0.
func commandLen(s string, cmds []string) int {
	if len(s) == 0 || s[0] != '\\' {
		return 0
	}
	for _, c := range cmds {
		if strings.HasPrefix(s, c) && (len(s) == len(c) || !isASCIILetter(s[len(c)])) {
			return len(c)
		}
	}
	return 0
}

// isUnitText says whether text could be a unit: words only, no digits or
// brackets ("\text{(C)}" is an answer, not a unit).
func isUnitText(t string) bool {
	letters := false
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case isASCIILetter(c):
			letters = true
		case c == ' ' || c == '.' || c == '/' || c == '-' || c == '\'' || c == '^':
		default:
			return false
		}
	}
	return letters
}

// followsNumber says whether text written so far ends in something a unit
// can follow: a digit, a closing bracket (\frac{1}{2}), or a command (\pi).
func followsNumber(prev string) bool {
	prev = strings.TrimRight(prev, " ")
	if prev == "" {
		return false
	}
	c := prev[len(prev)-1]
	if isASCIIDigit(c) || c == '}' || c == ')' || c == ']' {
		return true
	}
	i := len(prev)
	for i > 0 && isASCIILetter(prev[i-1]) {
		i--
	}
	return i < len(prev) && i > 0 && prev[i-1] == '\\'
}

// skipExponent steps over a unit's "^2" or "^{3}" (cm^2).
func skipExponent(s string, i int) int {
	j := skipBlanks(s, i)
	if j+1 >= len(s) || s[j] != '^' {
		return i
	}
	if isASCIIDigit(s[j+1]) {
		return j + 2
	}
	if s[j+1] == '{' {
		if end := braceEnd(s, j+1); end > 0 {
			return end
		}
	}
	return i
}

// endsAnswerPart says whether rest begins where an answer part ends, so
// "12\text{ and }13" keeps its words but "5\text{ cm}, 6" drops the unit.
func endsAnswerPart(rest string) bool {
	rest = strings.TrimLeft(rest, " ")
	return rest == "" || strings.IndexByte(",;)]}&\\.", rest[0]) >= 0
}

// unitWords are bare words that only name a unit after a number
// ("5 cm", "12 square feet", "28 percent").
var unitWords = wordSet(strings.Fields(`
	unit units sq square squared cubic cm mm km m meter meters metre metres
	centimeter centimeters kilometer kilometers in inch inches ft foot feet
	yd yard yards mi mile miles g gram grams kg kilogram kilograms lb lbs
	pound pounds oz ounce ounces l liter liters litre litres ml s sec secs
	second seconds min mins minute minutes h hr hrs hour hours day days
	week weeks month months year years mph kmh degree degrees deg radian
	radians dollar dollars cent cents percent pct people students ways`))

func wordSet(words []string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// dropUnitWords removes trailing unit words written without \text after a
// number. It needs a space before them: "5m" may be 5 times m.
func dropUnitWords(s string) (string, bool) {
	f := strings.Fields(s)
	n, pct := len(f), false
	for n > 1 && unitWords[strings.ToLower(strings.TrimRight(f[n-1], "."))] {
		w := strings.ToLower(strings.TrimRight(f[n-1], "."))
		pct = pct || w == "percent" || w == "pct"
		n--
	}
	if n == len(f) || !followsNumber(f[n-1]) || hasPlainLetter(strings.Join(f[:n], "")) {
		return s, false // "x + 2 m": m may be a variable there
	}
	return strings.Join(f[:n], " "), pct
}

// hasPlainLetter says whether s has a letter outside a command name.
func hasPlainLetter(s string) bool {
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			for i+1 < len(s) && isASCIILetter(s[i+1]) {
				i++
			}
		case isASCIILetter(s[i]):
			return true
		}
	}
	return false
}

// collapseSpaces removes spaces, but keeps one between a command and a
// following letter, where removing it would rename the command
// ("\pi r" is not "\pir").
func collapseSpaces(s string) string {
	var b strings.Builder
	afterCommand := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ':
			j := skipBlanks(s, i)
			if afterCommand && j < len(s) && isASCIILetter(s[j]) {
				b.WriteByte(' ')
			}
			i = j - 1
			afterCommand = false
		case c == '\\' && i+1 < len(s) && isASCIILetter(s[i+1]):
			j := i + 1
			for j < len(s) && isASCIILetter(s[j]) {
				j++
			}
			b.WriteString(s[i:j])
			i = j - 1
			afterCommand = true
		case c == '\\' && i+1 < len(s):
			b.WriteString(s[i : i+2]) // \\ \{ \}: the second byte is not a space to drop
			i++
			afterCommand = false
		default:
			b.WriteByte(c)
			afterCommand = false
		}
	}
	return b.String()
}

var membershipRE = regexp.MustCompile(`^(?:[A-Za-z]|\\[A-Za-z]+)?\\in`)

// dropMembership turns "x\in[0,1)" into "[0,1)": the answer is the set.
func dropMembership(s string) string {
	loc := membershipRE.FindStringIndex(s)
	if loc == nil || (loc[1] < len(s) && isASCIILetter(s[loc[1]])) {
		return s // no match, or \infty / \int rather than \in
	}
	return s[loc[1]:]
}

var (
	// arrayBeginRE finds \begin{array}{cc}, a matrix written as an array.
	arrayBeginRE = regexp.MustCompile(`\\begin\{array\}\{[^}]*\}`)
	// leadingDotRE finds ".5" that lacks its 0.
	leadingDotRE = regexp.MustCompile(`(^|[^0-9.])\.([0-9])`)
	// thousandsRE is a number with comma-separated groups of three, which is
	// read as one number rather than a list.
	thousandsRE = regexp.MustCompile(`^[-+]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?$`)
	infinityRE  = regexp.MustCompile(`(^|[^\\A-Za-z])(?:infinity|inf)([^A-Za-z]|$)`)
)

// spellInfinity turns "inf"/"infinity" into \infty. Two passes, because a
// match consumes the separator the next one needs ("inf,inf").
func spellInfinity(s string) string {
	if !strings.Contains(s, "inf") {
		return s
	}
	for k := 0; k < 2; k++ {
		s = infinityRE.ReplaceAllString(s, `${1}\infty${2}`)
	}
	return s
}

// braceArgs rewrites "\frac12" as "\frac{1}{2}" and "\sqrt2" as "\sqrt{2}"
// (TeX takes one token as an argument; a digit run for \sqrt, as Qwen's
// _fix_sqrt does), so strings compare equal and the parser sees groups.
func braceArgs(s string, depth int) string {
	if depth > maxDepth || !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		cmd, nargs := argCommand(s[i:])
		if cmd == "" {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(cmd)
		i += len(cmd)
		if cmd == `\sqrt` && i < len(s) && s[i] == '[' {
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				continue
			}
			b.WriteString(s[i : i+end+1])
			i += end + 1
		}
		for k := 0; k < nargs && i < len(s); k++ {
			i = writeArg(&b, s, i, cmd == `\sqrt`, depth)
		}
	}
	return b.String()
}

func argCommand(s string) (string, int) {
	for _, c := range []struct {
		name string
		n    int
	}{{`\frac`, 2}, {`\sqrt`, 1}, {`\binom`, 2}} {
		if strings.HasPrefix(s, c.name) && (len(s) == len(c.name) || !isASCIILetter(s[len(c.name)])) {
			return c.name, c.n
		}
	}
	return "", 0
}

// writeArg writes the argument at s[i:] as a brace group and returns where
// it ends; anything that cannot start an argument is left for the caller.
func writeArg(b *strings.Builder, s string, i int, digitRun bool, depth int) int {
	if s[i] == ' ' {
		i++
	}
	if i >= len(s) {
		return i
	}
	end := i + 1
	switch c := s[i]; {
	case c == '{':
		end = braceEnd(s, i)
		if end < 0 {
			b.WriteString(s[i:])
			return len(s)
		}
		b.WriteByte('{')
		b.WriteString(braceArgs(s[i+1:end-1], depth+1))
		b.WriteByte('}')
		return end
	case c == '\\':
		for end < len(s) && isASCIILetter(s[end]) {
			end++
		}
	case isASCIIDigit(c):
		for digitRun && end < len(s) && isASCIIDigit(s[end]) {
			end++
		}
	case isASCIILetter(c):
	default:
		return i
	}
	b.WriteByte('{')
	b.WriteString(s[i:end])
	b.WriteByte('}')
	return end
}

// braceEnd returns the index just past the '}' matching the '{' at s[i],
// or -1; escaped braces do not count.
func braceEnd(s string, i int) int {
	depth := 0
	for ; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// ---------------------------------------------------------------------
// Structure: an answer is a scalar, a tuple/interval, an unordered list or
// set, a matrix, a union of intervals, or an equation.

type answerKind int

const (
	kindScalar answerKind = iota
	kindTuple             // ordered, brackets kept: points, vectors, intervals
	kindList              // unordered: "1, 2", \{1,2\}, the two roots of a \pm
	kindMatrix
	kindUnion
	kindEquation
)

type mathAnswer struct {
	kind        answerKind
	text        string // normalised, lower-cased: the string fallback
	open, close byte   // kindTuple's brackets
	rows        int    // kindMatrix; items are row-major
	items       []*mathAnswer
	lhs         string    // the variable a scalar was assigned to ("y" of y=2x)
	expr        *mathNode // kindScalar when it parses as an expression
	vals        []float64 // expr at the sample points
	varFree     bool      // expr has no variables: a number
}

// parseAnswer splits a normalised answer into its structure.
func parseAnswer(s string, depth int) *mathAnswer {
	s = stripOuterBraces(s)
	s, lhs := dropAssignment(s)
	s = stripOuterBraces(s)
	a := &mathAnswer{text: strings.ToLower(s), lhs: lhs}
	if depth > maxDepth || s == "" {
		return a
	}
	if s == `\emptyset` {
		a.kind = kindList
		return a
	}
	if parseMatrix(a, s, depth) || parseMatrix(a, unbracketMatrix(s), depth) {
		return a
	}
	if parts := splitTop(s, `\cup`); len(parts) > 1 {
		return withItems(a, kindUnion, parts, depth)
	}
	if strings.HasPrefix(s, `\{`) && strings.HasSuffix(s, `\}`) && groupEnd(s) == len(s) {
		inner := s[2 : len(s)-2]
		if inner == "" {
			a.kind = kindList
			return a
		}
		return withItems(a, kindList, splitTop(inner, ","), depth)
	}
	if parseTuple(a, s, depth) {
		return a
	}
	if parts := splitTop(s, ","); len(parts) > 1 {
		return withItems(a, kindList, parts, depth)
	}
	if parts, ok := expandPlusMinus(s); ok {
		return withItems(a, kindList, parts, depth)
	}
	if parts := splitTop(s, "="); len(parts) == 2 {
		return withItems(a, kindEquation, parts, depth)
	}
	parseScalar(a, s)
	return a
}

func withItems(a *mathAnswer, k answerKind, parts []string, depth int) *mathAnswer {
	a.kind = k
	for _, p := range parts {
		if pm, ok := expandPlusMinus(p); ok && k == kindList {
			// \{1\pm\sqrt5, -2\} has three elements, not two.
			a.items = append(a.items, parseAnswer(pm[0], depth+1), parseAnswer(pm[1], depth+1))
			continue
		}
		a.items = append(a.items, parseAnswer(p, depth+1))
	}
	return a
}

// stripOuterBraces removes TeX grouping braces around the whole answer.
func stripOuterBraces(s string) string {
	for len(s) >= 2 && s[0] == '{' && braceEnd(s, 0) == len(s) {
		s = s[1 : len(s)-1]
	}
	return s
}

var assignmentLHS = regexp.MustCompile(`^(?:[A-Za-z]{1,2}|[A-Za-z]_(?:[A-Za-z0-9]|\{[A-Za-z0-9]+\})|\\[A-Za-z]+|[A-Za-z]\([A-Za-z]\)|\((?:[A-Za-z],)+[A-Za-z]\))$`)

// dropAssignment turns "k=3", "x_1=2", "f(x)=x^2" or "(x,y)=(1,2)" into the
// value, as Qwen drops a short left-hand side; it returns the dropped name
// so "y=2x+1" can still be compared with an equation.
func dropAssignment(s string) (string, string) {
	parts := splitTop(s, "=")
	if len(parts) != 2 || !assignmentLHS.MatchString(parts[0]) || parts[1] == "" {
		return s, ""
	}
	return parts[1], parts[0]
}

// parseMatrix reads \begin{pmatrix} a & b \\ c & d \end{pmatrix}.
func parseMatrix(a *mathAnswer, s string, depth int) bool {
	const begin, end = `\begin{pmatrix}`, `\end{pmatrix}`
	if !strings.HasPrefix(s, begin) || !strings.HasSuffix(s, end) || groupEnd(s) != len(s) {
		return false
	}
	var cells []string
	cols := -1
	rows := 0
	for _, row := range splitTop(s[len(begin):len(s)-len(end)], `\\`) {
		if row == "" {
			continue // a trailing \\ before \end
		}
		c := splitTop(row, "&")
		if cols >= 0 && len(c) != cols {
			return false
		}
		cols = len(c)
		cells = append(cells, c...)
		rows++
	}
	withItems(a, kindMatrix, cells, depth)
	a.rows = rows
	return true
}

// unbracketMatrix drops brackets around a whole matrix, "(\begin{pmatrix}
// ...\end{pmatrix})" or "[\begin{array}...]", which add nothing.
func unbracketMatrix(s string) string {
	if len(s) > 2 && (s[0] == '(' || s[0] == '[') && strings.HasPrefix(s[1:], `\begin{`) && groupEnd(s) == len(s) {
		return s[1 : len(s)-1]
	}
	return s
}

// parseTuple reads (a, b), [a, b) and the like; one element in brackets is
// a parenthesised scalar, not a tuple.
func parseTuple(a *mathAnswer, s string, depth int) bool {
	if len(s) < 2 || strings.IndexByte("([", s[0]) < 0 || strings.IndexByte(")]", s[len(s)-1]) < 0 {
		return false
	}
	if groupEnd(s) != len(s) {
		return false
	}
	parts := splitTop(s[1:len(s)-1], ",")
	if len(parts) < 2 {
		return false
	}
	withItems(a, kindTuple, parts, depth)
	a.open, a.close = s[0], s[len(s)-1]
	return true
}

// expandPlusMinus reads "1\pm\sqrt{2}" as the two values it names.
func expandPlusMinus(s string) ([]string, bool) {
	if !strings.Contains(s, `\pm`) && !strings.Contains(s, `\mp`) {
		return nil, false
	}
	plus := strings.NewReplacer(`\pm`, "+", `\mp`, "-").Replace(s)
	minus := strings.NewReplacer(`\pm`, "-", `\mp`, "+").Replace(s)
	return []string{plus, minus}, true
}

// tokenAt returns the length of the bracket-aware token at s[i:] and how it
// changes nesting depth: every bracket kind counts alike, so half-open
// intervals like [0,1) still nest.
func tokenAt(s string, i int) (int, int) {
	switch s[i] {
	case '(', '[', '{':
		return 1, 1
	case ')', ']', '}':
		return 1, -1
	case '\\':
		for _, env := range []struct {
			prefix string
			delta  int
		}{{`\begin{`, 1}, {`\end{`, -1}} {
			if strings.HasPrefix(s[i:], env.prefix) {
				if j := strings.IndexByte(s[i+len(env.prefix):], '}'); j >= 0 {
					return len(env.prefix) + j + 1, env.delta
				}
			}
		}
		if i+1 < len(s) {
			switch s[i+1] {
			case '{':
				return 2, 1
			case '}':
				return 2, -1
			}
			return 2, 0
		}
	}
	return 1, 0
}

// groupEnd returns the index just past the group opened at s[0], or -1.
func groupEnd(s string) int {
	depth := 0
	for i := 0; i < len(s); {
		n, d := tokenAt(s, i)
		depth += d
		i += n
		if depth < 0 || depth == 0 && d == 0 {
			return -1 // s does not start with an opener
		}
		if depth == 0 {
			return i
		}
	}
	return -1
}

// splitTop splits s at every sep outside brackets and environments.
func splitTop(s, sep string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); {
		if depth == 0 && strings.HasPrefix(s[i:], sep) && !splitsCommand(s, i, sep) {
			parts = append(parts, s[start:i])
			i += len(sep)
			start = i
			continue
		}
		n, d := tokenAt(s, i)
		depth += d
		i += n
	}
	return append(parts, s[start:])
}

// splitsCommand keeps "\cup" from matching inside "\cupcake" (and similar).
func splitsCommand(s string, i int, sep string) bool {
	j := i + len(sep)
	return isASCIILetter(sep[len(sep)-1]) && j < len(s) && isASCIILetter(s[j])
}

// ---------------------------------------------------------------------
// Comparison.

// equalAnswers compares got with want; pct lets numbers match a percentage
// read either way.
func equalAnswers(got, want *mathAnswer, pct bool) bool {
	if got.text == want.text && got.text != "" {
		return true
	}
	switch {
	case got.kind == kindScalar && want.kind == kindScalar:
		return scalarEqual(got, want, pct)
	case got.kind == kindTuple && want.kind == kindTuple:
		return got.open == want.open && got.close == want.close && inOrder(got.items, want.items, pct)
	case got.kind == kindList && want.kind == kindList:
		return anyOrder(got.items, want.items, pct)
	case got.kind == kindList && isParenTuple(want):
		return inOrder(got.items, want.items, pct) // the reference fixes the order
	case isParenTuple(got) && want.kind == kindList:
		return anyOrder(got.items, want.items, pct) // the reference has none
	case got.kind == kindList && len(got.items) == 1 && want.kind == kindScalar:
		return equalAnswers(got.items[0], want, pct) // \{5\} vs 5
	case want.kind == kindList && len(want.items) == 1 && got.kind == kindScalar:
		return equalAnswers(got, want.items[0], pct)
	case got.kind == kindMatrix && want.kind == kindMatrix:
		return got.rows == want.rows && inOrder(got.items, want.items, pct)
	case got.kind == kindUnion && want.kind == kindUnion:
		return inOrder(got.items, want.items, pct)
	case got.kind == kindEquation || want.kind == kindEquation:
		return equationEqual(got, want)
	}
	return false
}

func isParenTuple(a *mathAnswer) bool {
	return a.kind == kindTuple && a.open == '(' && a.close == ')'
}

func inOrder(got, want []*mathAnswer, pct bool) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !equalAnswers(got[i], want[i], pct) {
			return false
		}
	}
	return true
}

// anyOrder matches the elements greedily; equality here is close to an
// equivalence, so greedy matching is enough in practice.
func anyOrder(got, want []*mathAnswer, pct bool) bool {
	if len(got) != len(want) {
		return false
	}
	used := make([]bool, len(want))
	for _, g := range got {
		found := false
		for j, w := range want {
			if !used[j] && equalAnswers(g, w, pct) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// scalarEqual compares two scalars that differ as strings: as numbers when
// both are constants, else by their values at the sample points.
func scalarEqual(got, want *mathAnswer, pct bool) bool {
	if got.expr == nil || want.expr == nil {
		return false
	}
	if got.varFree && want.varFree {
		return numberEqual(got.vals[0], want.vals[0], pct)
	}
	return sameAtPoints(got.vals, want.vals, 1)
}

// numberEqual is Qwen's numeric test: the reference may be a percentage
// read as value/100 or value*100 (only when a % was written, unlike Qwen,
// so 1 and 100 stay different).
func numberEqual(got, want float64, pct bool) bool {
	if closeNumber(got, want) {
		return true
	}
	return pct && (closeNumber(got, want/100) || closeNumber(got, want*100))
}

// closeNumber compares within relTol, but whole numbers exactly: 10000 and
// 10001 are different answers, even though isclose(rel_tol=1e-4) says equal.
func closeNumber(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return false
	}
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return a == b
	}
	if isWhole(a) && isWhole(b) {
		return a == b
	}
	return math.Abs(a-b) <= relTol*math.Max(math.Abs(a), math.Abs(b))+absTol
}

func isWhole(x float64) bool {
	return x == math.Trunc(x) && math.Abs(x) < 1<<53
}

// sameAtPoints says whether got equals scale*want at every sample point
// where both are defined, with enough such points to trust it.
func sameAtPoints(got, want []float64, scale float64) bool {
	n := 0
	for i := range got {
		g, w := got[i], want[i]*scale
		if !isFinite(g) || !isFinite(w) {
			continue
		}
		if math.Abs(g-w) > symTol*math.Max(math.Abs(g), math.Abs(w))+absTol {
			return false
		}
		n++
	}
	return n >= minPoints
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// equationEqual compares equations as lhs-rhs up to a constant factor
// (Math-Verify accepts x^2/4+y^2/3=1 as x^2/16+y^2/12=1/4; Qwen at least
// the sign), turning an assigned scalar "y=..." back into an equation.
func equationEqual(got, want *mathAnswer) bool {
	g, ok1 := equationValues(got)
	w, ok2 := equationValues(want)
	if !ok1 || !ok2 {
		return false
	}
	scale, ok := ratioAtFirstPoint(g, w)
	return ok && sameAtPoints(g, w, scale)
}

// equationValues is lhs-rhs at the sample points.
func equationValues(a *mathAnswer) ([]float64, bool) {
	var lhs, rhs *mathNode
	switch {
	case a.kind == kindEquation && len(a.items) == 2:
		lhs, rhs = a.items[0].expr, a.items[1].expr
	case a.kind == kindScalar && a.lhs != "" && a.expr != nil:
		lhs, _ = parseTeX(a.lhs)
		rhs = a.expr
	}
	if lhs == nil || rhs == nil {
		return nil, false
	}
	return sampleAt(&mathNode{op: '-', kids: []*mathNode{lhs, rhs}}), true
}

// ratioAtFirstPoint is got/want at the first point where both are defined
// and nonzero; 0=0 everywhere (an identity) has none.
func ratioAtFirstPoint(got, want []float64) (float64, bool) {
	for i := range got {
		if isFinite(got[i]) && isFinite(want[i]) && math.Abs(got[i]) > absTol && math.Abs(want[i]) > absTol {
			return got[i] / want[i], true
		}
	}
	return 0, false
}

// ---------------------------------------------------------------------
// Expressions: a small LaTeX arithmetic parser evaluating to float64.

// parseScalar parses s as an expression and samples it; words ("Monday",
// "nosolution") and anything else it cannot read stay text.
func parseScalar(a *mathAnswer, s string) {
	if hasWord(s) {
		return
	}
	n, ok := parseTeX(s)
	if !ok {
		return
	}
	vals := sampleAt(n)
	free := !hasVars(n)
	if free && !isFinite(vals[0]) && !strings.Contains(s, `\infty`) {
		return // 1/0 or \sqrt{-1}: not a number this grader can compare
	}
	a.expr, a.vals, a.varFree = n, vals, free
}

// hasWord says whether s has a run of three or more letters outside a
// command name: such a run is a word, and reading it as a product of
// variables would make "Monday" equal "Mondya".
func hasWord(s string) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			for i+1 < len(s) && isASCIILetter(s[i+1]) {
				i++
			}
			run = 0
		case isASCIILetter(s[i]):
			run++
			if run >= 3 {
				return true
			}
		default:
			run = 0
		}
	}
	return false
}

// mathNode is an expression tree mathNode.
type mathNode struct {
	op   byte // 'n' number, 'v' variable, '~' negate, + - * / ^, '!' factorial, 'r' root, 'b' binomial, '|' abs, 'f' function
	val  float64
	name string // variable or function name
	kids []*mathNode
}

type texParser struct {
	s     string
	i     int
	depth int
}

// parseTeX parses a whole normalised scalar.
func parseTeX(s string) (*mathNode, bool) {
	p := &texParser{s: s}
	n := p.sum()
	p.skipSpace()
	if n == nil || p.i != len(p.s) {
		return nil, false
	}
	return n, true
}

func binNode(op byte, a, b *mathNode) *mathNode {
	if a == nil || b == nil {
		return nil
	}
	return &mathNode{op: op, kids: []*mathNode{a, b}}
}

func unaryNode(op byte, a *mathNode) *mathNode {
	if a == nil {
		return nil
	}
	return &mathNode{op: op, kids: []*mathNode{a}}
}

func (p *texParser) skipSpace() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *texParser) peek() byte {
	p.skipSpace()
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *texParser) eat(tok string) bool {
	p.skipSpace()
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}

// eatCommand consumes \name when it is the whole command at p.i.
func (p *texParser) eatCommand(name string) bool {
	p.skipSpace()
	rest := p.s[p.i:]
	if len(rest) > len(name) && rest[0] == '\\' && strings.HasPrefix(rest[1:], name) &&
		(len(rest) == len(name)+1 || !isASCIILetter(rest[len(name)+1])) {
		p.i += len(name) + 1
		return true
	}
	return false
}

// enter guards recursion depth; every recursive rule calls it.
func (p *texParser) enter() bool {
	p.depth++
	return p.depth <= maxDepth
}

func (p *texParser) leave() { p.depth-- }

func (p *texParser) sum() *mathNode {
	defer p.leave()
	if !p.enter() {
		return nil
	}
	n := p.term()
	for n != nil {
		switch {
		case p.eat("+"):
			n = binNode('+', n, p.term())
		case p.eat("-"):
			n = binNode('-', n, p.term())
		default:
			return n
		}
	}
	return nil
}

func (p *texParser) term() *mathNode {
	n := p.unary()
	for n != nil {
		switch {
		case p.eat("*"), p.eatCommand("cdot"), p.eatCommand("times"):
			n = binNode('*', n, p.unary())
		case p.eat("/"), p.eatCommand("div"):
			n = binNode('/', n, p.unary())
		case p.startsFactor():
			n = binNode('*', n, p.power()) // implicit: 2x, 2\sqrt{3}, (a)(b)
		default:
			return n
		}
	}
	return nil
}

// startsFactor says whether an implicit product continues at p.i. A '.'
// does not (so "1.2.3" fails), nor '|' (it may close an absolute value).
func (p *texParser) startsFactor() bool {
	c := p.peek()
	switch {
	case isASCIIDigit(c), isASCIILetter(c), c == '(', c == '[', c == '{':
		return true
	case c == '\\':
		name := commandName(p.s[p.i:])
		return isPrimaryCommand(name)
	}
	return false
}

func (p *texParser) unary() *mathNode {
	defer p.leave()
	if !p.enter() {
		return nil
	}
	switch {
	case p.eat("-"):
		return unaryNode('~', p.unary())
	case p.eat("+"):
		return p.unary()
	}
	return p.power()
}

// power binds tighter than unary minus (-2^2 = -4) and is right
// associative through unary (2^3^2 = 2^9, x^-1).
func (p *texParser) power() *mathNode {
	defer p.leave()
	if !p.enter() {
		return nil
	}
	base := p.postfix()
	if base != nil && (p.eat("^") || p.eat("**")) {
		return binNode('^', base, p.unary())
	}
	return base
}

func (p *texParser) postfix() *mathNode {
	n := p.primary()
	for n != nil && p.eat("!") {
		n = unaryNode('!', n)
	}
	return n
}

func (p *texParser) primary() *mathNode {
	defer p.leave()
	if !p.enter() {
		return nil
	}
	switch c := p.peek(); {
	case isASCIIDigit(c) || c == '.':
		return p.number()
	case c == '(':
		return p.group("(", ")")
	case c == '[':
		return p.group("[", "]")
	case c == '{':
		return p.group("{", "}")
	case c == '|':
		return unaryNode('|', p.group("|", "|"))
	case isASCIILetter(c):
		return p.variable()
	case c == '\\':
		return p.command()
	}
	return nil
}

func (p *texParser) group(open, close string) *mathNode {
	if !p.eat(open) {
		return nil
	}
	n := p.sum()
	if n == nil || !p.eat(close) {
		return nil
	}
	return n
}

func (p *texParser) number() *mathNode {
	start := p.i
	for p.i < len(p.s) && isASCIIDigit(p.s[p.i]) {
		p.i++
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		for p.i < len(p.s) && isASCIIDigit(p.s[p.i]) {
			p.i++
		}
	}
	v, err := strconv.ParseFloat(p.s[start:p.i], 64)
	if err != nil {
		return nil
	}
	return &mathNode{op: 'n', val: v}
}

// variable reads one letter with an optional subscript (x_1, a_{10}); "e"
// alone is Euler's number, as Math-Verify reads it.
func (p *texParser) variable() *mathNode {
	name := p.s[p.i : p.i+1]
	p.i++
	if p.i+1 < len(p.s) && p.s[p.i] == '_' {
		if sub, ok := p.subscript(); ok {
			name += "_" + sub
		} else {
			return nil
		}
	}
	if name == "e" {
		return &mathNode{op: 'n', val: math.E}
	}
	return &mathNode{op: 'v', name: name}
}

func (p *texParser) subscript() (string, bool) {
	p.i++ // '_'
	c := p.s[p.i]
	if isASCIIDigit(c) || isASCIILetter(c) {
		p.i++
		return string(c), true
	}
	if c != '{' {
		return "", false
	}
	end := braceEnd(p.s, p.i)
	if end < 0 {
		return "", false
	}
	sub := p.s[p.i+1 : end-1]
	p.i = end
	return sub, true
}

// texFunctions are the named texFunctions the evaluator knows.
var texFunctions = wordSet(strings.Fields(
	"sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh ln log exp"))

// texGreek letters are variables.
var texGreek = wordSet(strings.Fields(`alpha beta gamma delta epsilon varepsilon
	zeta eta theta vartheta iota kappa lambda mu nu xi rho sigma tau phi
	varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Phi Psi Omega`))

func commandName(s string) string {
	j := 1
	for j < len(s) && isASCIILetter(s[j]) {
		j++
	}
	return s[1:j]
}

func isPrimaryCommand(name string) bool {
	switch name {
	case "frac", "sqrt", "binom", "pi", "infty":
		return true
	}
	return texFunctions[name] || texGreek[name]
}

func (p *texParser) command() *mathNode {
	name := commandName(p.s[p.i:])
	p.i += len(name) + 1
	switch {
	case name == "frac":
		return binNode('/', p.arg(), p.arg())
	case name == "binom":
		return binNode('b', p.arg(), p.arg())
	case name == "sqrt":
		return p.root()
	case name == "pi":
		return &mathNode{op: 'n', val: math.Pi}
	case name == "infty":
		return &mathNode{op: 'n', val: math.Inf(1)}
	case texGreek[name]:
		return &mathNode{op: 'v', name: `\` + name}
	case texFunctions[name]:
		return p.function(name)
	}
	return nil
}

// arg reads a command argument: a brace group, or a single token.
func (p *texParser) arg() *mathNode {
	defer p.leave()
	if !p.enter() {
		return nil
	}
	switch c := p.peek(); {
	case c == '{':
		return p.group("{", "}")
	case isASCIIDigit(c):
		p.i++
		return &mathNode{op: 'n', val: float64(c - '0')}
	case isASCIILetter(c):
		return p.variable()
	case c == '\\':
		return p.command()
	}
	return nil
}

// root reads \sqrt{x} or \sqrt[n]{x}.
func (p *texParser) root() *mathNode {
	index := &mathNode{op: 'n', val: 2}
	if p.eat("[") {
		index = p.sum()
		if index == nil || !p.eat("]") {
			return nil
		}
	}
	return binNode('r', index, p.arg())
}

// function reads \sin x, \sin(x), \sin^2 x, \log_2 8.
func (p *texParser) function(name string) *mathNode {
	var exponent, base *mathNode
	if p.eat("^") {
		if exponent = p.arg(); exponent == nil {
			return nil
		}
	}
	if name == "log" && p.eat("_") {
		if base = p.arg(); base == nil {
			return nil
		}
	}
	// \sin(x)^2 squares the sine, \sin x^2 takes the sine of a square.
	parenthesised := p.peek() == '('
	var x *mathNode
	if parenthesised {
		x = p.group("(", ")")
	} else {
		x = p.power()
	}
	if x == nil {
		return nil
	}
	n := &mathNode{op: 'f', name: name, kids: []*mathNode{x}}
	if base != nil {
		n = binNode('/', &mathNode{op: 'f', name: "ln", kids: []*mathNode{x}}, &mathNode{op: 'f', name: "ln", kids: []*mathNode{base}})
	}
	if exponent != nil {
		n = binNode('^', n, exponent)
	}
	if parenthesised && (p.eat("^") || p.eat("**")) {
		n = binNode('^', n, p.unary())
	}
	return n
}

// ---------------------------------------------------------------------
// Evaluation.

func hasVars(n *mathNode) bool {
	if n.op == 'v' {
		return true
	}
	for _, k := range n.kids {
		if hasVars(k) {
			return true
		}
	}
	return false
}

// sample evaluates n at every sample point.
func sampleAt(n *mathNode) []float64 {
	vals := make([]float64, numPoints)
	for pt := range vals {
		vals[pt] = n.eval(pt)
	}
	return vals
}

// varValue is the value of a variable at a sample point: fixed, so results
// are deterministic; pseudo-random and away from 0 and small integers, so
// unequal expressions rarely agree by accident.
func varValue(name string, point int) float64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	h = splitMix(h ^ uint64(point+1)*0x9e3779b97f4a7c15)
	v := 0.35 + 2.4*float64(h>>11)/(1<<53)
	if point >= positivePoints && h&1 == 1 {
		v = -v
	}
	return v
}

func splitMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func (n *mathNode) eval(pt int) float64 {
	switch n.op {
	case 'n':
		return n.val
	case 'v':
		return varValue(n.name, pt)
	case '~':
		return -n.kids[0].eval(pt)
	case '!':
		return factorial(n.kids[0].eval(pt))
	case '|':
		return math.Abs(n.kids[0].eval(pt))
	case 'f':
		return applyFunction(n.name, n.kids[0].eval(pt))
	}
	a, b := n.kids[0].eval(pt), n.kids[1].eval(pt)
	switch n.op {
	case '+':
		return a + b
	case '-':
		return a - b
	case '*':
		return a * b
	case '/':
		return a / b
	case '^':
		return math.Pow(a, b)
	case 'r':
		return nthRoot(a, b)
	case 'b':
		return binomial(a, b)
	}
	return math.NaN()
}

// root is the k-th root; odd roots of negatives are real (\sqrt[3]{-8}=-2).
func nthRoot(k, x float64) float64 {
	switch {
	case k == 2:
		return math.Sqrt(x)
	case k == 3:
		return math.Cbrt(x)
	case x < 0 && isWhole(k) && math.Mod(k, 2) == 1:
		return -math.Pow(-x, 1/k)
	}
	return math.Pow(x, 1/k)
}

func factorial(x float64) float64 {
	if !isWhole(x) || x < 0 || x > 170 {
		return math.NaN()
	}
	f := 1.0
	for i := 2.0; i <= x; i++ {
		f *= i
	}
	return f
}

func binomial(n, k float64) float64 {
	if !isWhole(n) || !isWhole(k) || k < 0 || n < k || n > 1e6 {
		return math.NaN()
	}
	k = math.Min(k, n-k)
	if k > 1000 {
		lg := func(x float64) float64 { v, _ := math.Lgamma(x); return v }
		return math.Round(math.Exp(lg(n+1) - lg(k+1) - lg(n-k+1)))
	}
	r := 1.0
	for i := 1.0; i <= k; i++ {
		r = r * (n - k + i) / i
	}
	return math.Round(r)
}

// applyFunction evaluates a named function; \log is natural, as in sympy's
// LaTeX parser.
func applyFunction(name string, x float64) float64 {
	switch name {
	case "sin":
		return math.Sin(x)
	case "cos":
		return math.Cos(x)
	case "tan":
		return math.Tan(x)
	case "cot":
		return 1 / math.Tan(x)
	case "sec":
		return 1 / math.Cos(x)
	case "csc":
		return 1 / math.Sin(x)
	case "arcsin":
		return math.Asin(x)
	case "arccos":
		return math.Acos(x)
	case "arctan":
		return math.Atan(x)
	case "sinh":
		return math.Sinh(x)
	case "cosh":
		return math.Cosh(x)
	case "tanh":
		return math.Tanh(x)
	case "ln", "log":
		return math.Log(x)
	case "exp":
		return math.Exp(x)
	}
	return math.NaN()
}

func isASCIIDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isASCIILetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
