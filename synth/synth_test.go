package synth

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func mustGenerate(t *testing.T, o Options) *Set {
	t.Helper()
	s, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDeterministic: the same options give byte-identical files; another
// seed gives other problems; the held-out split does not depend on the
// training count.
func TestDeterministic(t *testing.T) {
	files := func(o Options) map[string][]byte {
		dir := t.TempDir()
		if err := mustGenerate(t, o).Write(dir); err != nil {
			t.Fatal(err)
		}
		out := map[string][]byte{}
		for _, f := range []string{TrainFile, HeldoutFile, TasksFile} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			out[f] = b
		}
		return out
	}
	o := Options{Train: 200, Heldout: 50, Seed: 7}
	a, b := files(o), files(o)
	for f := range a {
		if !bytes.Equal(a[f], b[f]) {
			t.Errorf("%s differs between two runs with the same seed", f)
		}
	}
	o.Seed = 8
	if c := files(o); bytes.Equal(a[HeldoutFile], c[HeldoutFile]) || bytes.Equal(a[TrainFile], c[TrainFile]) {
		t.Error("another seed gave the same problems")
	}
	o.Seed, o.Train = 7, 300
	if c := files(o); !bytes.Equal(a[HeldoutFile], c[HeldoutFile]) {
		t.Error("the held-out split changed with the training count")
	}
}

// TestDisjoint: no held-out problem (by canonical hash) is in train, and
// neither split repeats a problem.
func TestDisjoint(t *testing.T) {
	s := mustGenerate(t, Options{Train: 2000, Heldout: 200, Seed: 1})
	for _, sp := range s.Tasks {
		held := map[[32]byte]bool{}
		for i := range sp.Heldout {
			k := Hash(&sp.Heldout[i])
			if held[k] {
				t.Errorf("%s: held-out repeats %q", sp.Task.Name, sp.Heldout[i].Canonical)
			}
			held[k] = true
		}
		train := map[[32]byte]bool{}
		for i := range sp.Train {
			k := Hash(&sp.Train[i])
			if held[k] {
				t.Errorf("%s: held-out problem %q is in train", sp.Task.Name, sp.Train[i].Canonical)
			}
			if train[k] {
				t.Errorf("%s: train repeats %q", sp.Task.Name, sp.Train[i].Canonical)
			}
			train[k] = true
		}
		if len(sp.Train) != 2000 || len(sp.Heldout) != 200 {
			t.Errorf("%s: %d train, %d held-out", sp.Task.Name, len(sp.Train), len(sp.Heldout))
		}
	}
}

// TestCanonicalIgnoresPresentation: a+b and b+a (and reordered options)
// are one problem for the split.
func TestCanonicalIgnoresPresentation(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for range 200 {
		p := genAdd(r)
		a, b := operands(t, p.Prompt)
		q := Problem{Canonical: fmt.Sprintf("add:%d+%d", min(b, a), max(b, a))}
		if Hash(&p) != Hash(&q) {
			t.Fatalf("%q vs swapped", p.Canonical)
		}
	}
	if sortedKey([]int{47, 12, 99, 3}) != sortedKey([]int{99, 3, 12, 47}) || sortedKey([]int{47, 12}) != "12,47" {
		t.Error("option order changes the canonical form")
	}
}

var questionRE = regexp.MustCompile(`^What is (\d+)([+*])(\d+)\?$`)

func operands(t *testing.T, prompt string) (int, int) {
	t.Helper()
	m := questionRE.FindStringSubmatch(prompt)
	if m == nil {
		t.Fatalf("prompt %q", prompt)
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[3])
	return a, b
}

// solve answers a prompt independently of the generators.
func solve(t *testing.T, p *Problem) string {
	t.Helper()
	switch p.Task {
	case "add", "mul":
		a, b := operands(t, p.Prompt)
		if p.Task == "add" {
			return strconv.Itoa(a + b)
		}
		return strconv.Itoa(a * b)
	case "mcq":
		lines := strings.Split(p.Prompt, "\n")
		var opts []int
		for i, l := range lines[1:] {
			want := fmt.Sprintf("%c) ", 'A'+i)
			if !strings.HasPrefix(l, want) {
				t.Fatalf("option line %q", l)
			}
			v, err := strconv.Atoi(l[len(want):])
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, v)
		}
		var pick int
		switch lines[0] {
		case "Which is largest?":
			pick = slices.Index(opts, slices.Max(opts))
		case "Which is smallest?":
			pick = slices.Index(opts, slices.Min(opts))
		default:
			t.Fatalf("question %q", lines[0])
		}
		if pick < 0 {
			t.Fatalf("%q: no option is right", p.Prompt)
		}
		return string(rune('A' + pick))
	case "trace":
		return interpret(t, p.Prompt)
	}
	t.Fatalf("unknown task %q", p.Task)
	return ""
}

// interpret runs a toy program written as the prompt of a trace problem.
func interpret(t *testing.T, prompt string) string {
	t.Helper()
	vars := map[string]int{}
	lines := strings.Split(prompt, "\n")
	for _, l := range lines[:len(lines)-1] {
		v, expr, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("statement %q", l)
		}
		vars[v] = evalExpr(t, expr, vars)
	}
	var q string
	if _, err := fmt.Sscanf(lines[len(lines)-1], "What is %1s?", &q); err != nil {
		t.Fatalf("question %q: %v", lines[len(lines)-1], err)
	}
	return strconv.Itoa(vars[q])
}

func evalExpr(t *testing.T, expr string, vars map[string]int) int {
	val := func(s string) int {
		if v, err := strconv.Atoi(s); err == nil {
			return v
		}
		v, ok := vars[s]
		if !ok {
			t.Fatalf("undefined %q", s)
		}
		return v
	}
	i := strings.IndexAny(expr, "+-*")
	if i < 0 {
		return val(expr)
	}
	x, y := val(expr[:i]), val(expr[i+1:])
	switch expr[i] {
	case '+':
		return x + y
	case '-':
		return x - y
	}
	return x * y
}

// TestAnswersAndTraces: every answer matches an independent solution, every
// arithmetic line of the work is true, the work ends where the answer is,
// and the problems stay short.
func TestAnswersAndTraces(t *testing.T) {
	s := mustGenerate(t, Options{Tasks: []string{"v1"}, Train: 500, Heldout: 100, Seed: 11})
	// A line of arithmetic: "u 7+5+1=13", "t 3*9=27+6=33", "c=07*2=14"
	// (the product's optional middle term, then an optional carry).
	line := regexp.MustCompile(`^(?:[utho] |[abcd]=)(\d+)([+*-])(\d+)(?:=(\d+))?(?:\+(\d+))?=(\d+)$`)
	for _, sp := range s.Tasks {
		for _, p := range slices.Concat(sp.Train, sp.Heldout) {
			if got := solve(t, &p); got != p.Answer {
				t.Fatalf("%s %q: answer %s, solved %s", p.Task, p.Prompt, p.Answer, got)
			}
			if p.Content() != "Answer: "+p.Answer {
				t.Fatalf("content %q", p.Content())
			}
			if n := len(p.Prompt) + len(p.Reasoning); n > 400 {
				t.Errorf("%s: %d characters is long for a tiny model: %q", p.Task, n, p.Prompt)
			}
			work := strings.Split(p.Reasoning, "\n")
			for _, l := range work {
				m := line.FindStringSubmatch(l)
				if m == nil {
					continue
				}
				x, _ := strconv.Atoi(m[1])
				y, _ := strconv.Atoi(m[3])
				c, _ := strconv.Atoi(m[5])
				z, _ := strconv.Atoi(m[6])
				want := map[string]int{"+": x + y + c, "-": x - y, "*": x*y + c}[m[2]]
				if m[4] != "" {
					if pp, _ := strconv.Atoi(m[4]); m[2] != "*" || pp != x*y {
						t.Fatalf("%s %q: false product in %q", p.Task, p.Prompt, l)
					}
				}
				if want != z {
					t.Fatalf("%s %q: false line %q", p.Task, p.Prompt, l)
				}
			}
			arith := 0
			for _, l := range work {
				if line.MatchString(l) {
					arith++
				}
			}
			if p.Task != "mcq" && arith == 0 {
				t.Fatalf("%s %q: no line of work checked", p.Task, p.Prompt)
			}
			last := work[len(work)-1]
			switch p.Task {
			case "add", "mul":
				if last != "="+p.Answer {
					t.Fatalf("%s %q: work ends %q, answer %s", p.Task, p.Prompt, last, p.Answer)
				}
			case "mcq":
				if last[1:2] != p.Answer {
					t.Fatalf("mcq %q: work ends %q, answer %s", p.Prompt, last, p.Answer)
				}
			}
			switch p.Task {
			case "add":
				checkColumns(t, &p, work)
			case "mul":
				checkProducts(t, &p, work)
			case "mcq":
				checkComparisons(t, &p, work)
			case "trace":
				checkTrace(t, &p, work)
			}
		}
	}
}

// checkColumns: an addition's column lines take the operands' digits from
// the right and pass each carry on.
func checkColumns(t *testing.T, p *Problem, work []string) {
	t.Helper()
	a, b := operands(t, p.Prompt)
	da, db := digits(a), digits(b)
	carry := 0
	for i, l := range work[:len(work)-1] {
		var place byte
		var x, y, c, s int
		if _, err := fmt.Sscanf(l, "%c %d+%d+%d=%d", &place, &x, &y, &c, &s); err != nil || place != placeLabels[i] {
			t.Fatalf("%q: column line %q: %v", p.Prompt, l, err)
		}
		if x != at(da, i) || y != at(db, i) || c != carry {
			t.Fatalf("%q: column %d is %q", p.Prompt, i, l)
		}
		carry = s / 10
	}
}

func TestGenerateErrors(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"unknown task", Options{Tasks: []string{"add", "chess"}, Train: 1}, `unknown task "chess"`},
		{"twice", Options{Tasks: []string{"add", "add"}, Train: 1}, "given twice"},
		{"nothing", Options{}, "nothing to generate"},
		{"negative", Options{Train: -1, Heldout: 3}, "negative"},
		{"size", Options{Train: 1, Size: "tpu"}, `size "tpu"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Generate(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// TestSmallSpace: a task with fewer distinct problems than asked is an
// error, not an endless loop.
func TestSmallSpace(t *testing.T) {
	tiny := &Task{Name: "tiny", gen: func(r *rand.Rand, _ Size) Problem {
		n := r.IntN(3)
		return Problem{Canonical: strconv.Itoa(n), Answer: strconv.Itoa(n)}
	}}
	if _, err := draw(tiny, Sizes["gpu"], 0, "train", 10, map[[32]byte]bool{}, nil); err == nil || !strings.Contains(err.Error(), "found only 3") {
		t.Fatalf("error %v", err)
	}
}

// checkComparisons: one line per option: the true comparison of the
// option with the best before it (the first option with itself), then the
// best letter and value after it.
func checkComparisons(t *testing.T, p *Problem, work []string) {
	t.Helper()
	value := map[byte]int{}
	for i, c := range p.Choices {
		value[letters[i]], _ = strconv.Atoi(c)
	}
	if len(work) != len(p.Choices) {
		t.Fatalf("%q: %d lines of work for %d options", p.Prompt, len(work), len(p.Choices))
	}
	largest := strings.Contains(p.Prompt, "largest")
	best := byte('A')
	for i, l := range work {
		var sym, w byte
		var bv int
		if _, err := fmt.Sscanf(l, "%c%c %d", &sym, &w, &bv); err != nil {
			t.Fatalf("%q: line %q: %v", p.Prompt, l, err)
		}
		cv, pv := value[letters[i]], value[best]
		if want := map[bool]byte{true: '>', false: '<'}[cv > pv]; cv == pv && sym != '=' || cv != pv && sym != want {
			t.Fatalf("%q: line %q: false comparison of option %c", p.Prompt, l, letters[i])
		}
		if cv != pv && (cv > pv) == largest {
			best = letters[i]
		}
		if w != best || bv != value[best] {
			t.Fatalf("%q: line %q names the wrong best", p.Prompt, l)
		}
	}
}

// checkProducts: a product's lines take the digits of the 3-digit factor
// from the right, multiply each by the one-digit factor and add the carry
// of the line before.
func checkProducts(t *testing.T, p *Problem, work []string) {
	t.Helper()
	a, d := operands(t, p.Prompt)
	da := digits(a)
	carry := 0
	for i, l := range work[:len(work)-1] {
		var place byte
		var x, y, pp, c, s int
		if _, err := fmt.Sscanf(l, "%c %d*%d=%d+%d=%d", &place, &x, &y, &pp, &c, &s); err != nil || place != placeLabels[i] {
			t.Fatalf("%q: product line %q: %v", p.Prompt, l, err)
		}
		if x != at(da, i) || y != d || c != carry {
			t.Fatalf("%q: digit %d is %q", p.Prompt, i, l)
		}
		carry = s / 10
	}
	if len(work)-1 != len(da) {
		t.Fatalf("%q: %d product lines for %d digits", p.Prompt, len(work)-1, len(da))
	}
}

// checkTrace: one line of work per statement, in order, each assigning the
// statement's variable.
func checkTrace(t *testing.T, p *Problem, work []string) {
	t.Helper()
	prog := strings.Split(p.Prompt, "\n")
	if len(work) != len(prog)-1 {
		t.Fatalf("%q: %d lines of work for %d statements", p.Prompt, len(work), len(prog)-1)
	}
	for i, l := range work {
		if l[:2] != prog[i][:2] {
			t.Fatalf("%q: work line %q does not run statement %q", p.Prompt, l, prog[i])
		}
	}
}

// TestWidths: every answer of a task has one width, and so does every
// number in a trace's work, so that a diffusion model filling a block knows
// where each number ends.
func TestWidths(t *testing.T) {
	s := mustGenerate(t, Options{Tasks: []string{"v1"}, Train: 1000, Heldout: 100, Seed: 5})
	want := map[string]*regexp.Regexp{
		"add":   regexp.MustCompile(`^[1-9]\d{3}$`),
		"mul":   regexp.MustCompile(`^[1-9]\d{3}$`),
		"mcq":   regexp.MustCompile(`^[ABCD]$`),
		"trace": regexp.MustCompile(`^[1-9]\d$`),
	}
	number := regexp.MustCompile(`\d+`)
	for _, sp := range s.Tasks {
		for _, p := range slices.Concat(sp.Train, sp.Heldout) {
			if !want[p.Task].MatchString(p.Answer) {
				t.Fatalf("%s %q: answer %q has the wrong width", p.Task, p.Prompt, p.Answer)
			}
			if p.Task != "trace" {
				continue
			}
			for _, n := range number.FindAllString(p.Prompt+"\n"+p.Reasoning, -1) {
				if v, _ := strconv.Atoi(n); len(n) == 2 && v < traceMin || len(n) > 2 {
					t.Fatalf("trace %q: value %s in %q", p.Prompt, n, p.Reasoning)
				}
			}
		}
	}
}
