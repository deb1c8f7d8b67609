package eval

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// mathCase is one row of testdata/math_equal.tsv.
type mathCase struct {
	line            int
	got, want, note string
	equal           bool
}

// loadMathCases reads the table: got, want, 1|0, note; '#' lines are
// comments.
func loadMathCases(tb testing.TB) []mathCase {
	tb.Helper()
	f, err := os.Open("testdata/math_equal.tsv")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var cases []mathCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 4 || (fields[2] != "0" && fields[2] != "1") {
			tb.Fatalf("math_equal.tsv:%d: want got<TAB>want<TAB>0|1<TAB>note, have %q", n, line)
		}
		cases = append(cases, mathCase{n, fields[0], fields[1], fields[3], fields[2] == "1"})
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return cases
}

func TestMathEqualTable(t *testing.T) {
	cases := loadMathCases(t)
	equal := 0
	for _, c := range cases {
		if c.equal {
			equal++
		}
		if got := MathEqual(c.got, c.want); got != c.equal {
			t.Errorf("line %d (%s): MathEqual(%q, %q) = %v, want %v", c.line, c.note, c.got, c.want, got, c.equal)
		}
	}
	// The table is the specification: keep it broad on both sides.
	if len(cases) < 220 || len(cases)-equal < 80 {
		t.Errorf("table has %d rows, %d unequal; want >= 220 and >= 80", len(cases), len(cases)-equal)
	}
}

// TestMathEqualSelf: any answer equals itself, the table's answers included.
func TestMathEqualSelf(t *testing.T) {
	for _, c := range loadMathCases(t) {
		for _, s := range []string{c.got, c.want} {
			if !MathEqual(s, s) {
				t.Errorf("line %d: MathEqual(%q, itself) = false", c.line, s)
			}
		}
	}
}

func TestMathEqualEdges(t *testing.T) {
	long := strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000)
	cases := []struct {
		got, want string
		equal     bool
	}{
		{"", "", false},     // nothing to grade
		{"  ", "0", false},  // blank answer
		{"$$", "$$", false}, // normalises to nothing
		{long, long, true},  // over the length cap: exact comparison
		{long, "1", false},  // over the cap is never evaluated
		{strings.Repeat("(", 100) + "1" + strings.Repeat(")", 100), "1", false}, // deeper than maxDepth
		{strings.Repeat("(", 10) + "1" + strings.Repeat(")", 10), "1", true},
	}
	for _, c := range cases {
		if got := MathEqual(c.got, c.want); got != c.equal {
			t.Errorf("MathEqual(%.40q, %.40q) = %v, want %v", c.got, c.want, got, c.equal)
		}
	}
}

// BenchmarkMathEqualWorstCase grades a set of the longest answer length
// (speed is measured here, never asserted in a test).
func BenchmarkMathEqualWorstCase(b *testing.B) {
	var sb strings.Builder
	for sb.Len() < maxAnswerLen-8 {
		sb.WriteString(`\sqrt{x},`)
	}
	s := `\{` + sb.String() + `\}`
	other := strings.ReplaceAll(s, "x", "y")
	for b.Loop() {
		MathEqual(s, other)
	}
}

func TestExtractBoxed(t *testing.T) {
	cases := []struct {
		name, in, want string
		ok             bool
	}{
		{"simple", `so $\boxed{5}$.`, "5", true},
		{"nested braces", `\boxed{\frac{1}{2}}`, `\frac{1}{2}`, true},
		{"deeply nested", `\boxed{\left\{ {a}, {b} \right\}}`, `\left\{ {a}, {b} \right\}`, true},
		{"escaped braces", `\boxed{\{1,2\}}`, `\{1,2\}`, true},
		{"last box wins", `\boxed{1} then \boxed{2}`, "2", true},
		{"inner box is last", `\boxed{\boxed{3}}`, "3", true},
		{"fbox", `\fbox{7}`, "7", true},
		{"fbox then boxed", `\fbox{7} and \boxed{8}`, "8", true},
		{"bare", `the answer is $\boxed 5$`, "5", true},
		{"bare to space", `\boxed 12 apples`, "12", true},
		{"bare digit", `\boxed5`, "5", true},
		{"spaced brace", `\boxed {6}`, "6", true},
		{"unclosed last box", `\boxed{4} and \boxed{5`, "4", true},
		{"none", `the answer is 5`, "", false},
		{"other command", `\boxedtext{5}`, "", false},
		{"unclosed", `\boxed{5`, "", false},
		{"empty", ``, "", false},
	}
	for _, c := range cases {
		got, ok := ExtractBoxed(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: ExtractBoxed(%q) = %q, %v; want %q, %v", c.name, c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzMathEqual: no panics, deterministic, and every answer that
// normalises to something equals itself.
func FuzzMathEqual(f *testing.F) {
	for _, c := range loadMathCases(f) {
		f.Add(c.got, c.want)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		r := MathEqual(a, b)
		if MathEqual(a, b) != r {
			t.Fatalf("MathEqual(%q, %q) is not deterministic", a, b)
		}
		if n, _ := normalizeMath(a); n != "" && !MathEqual(a, a) {
			t.Fatalf("MathEqual(%q, itself) = false (normalised %q)", a, n)
		}
		ExtractBoxed(a)
	})
}
