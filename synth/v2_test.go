package synth

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"dllm/eval"
)

// v2Sets are the second task set drawn at both sizes.
func v2Sets(t *testing.T) []*Set {
	t.Helper()
	var sets []*Set
	for _, size := range []string{"cpu", "gpu"} {
		sets = append(sets, mustGenerate(t, Options{Tasks: []string{"v2"}, Size: size, Train: 400, Dev: 50, Heldout: 50, Seed: 3}))
	}
	return sets
}

// arithLine is one "x op y=z" in a line of work.
var arithLine = regexp.MustCompile(`(-?\d+)([-+*/%])(-?\d+)=(-?\d+)`)

// checkArithmetic: every "x op y=z" in the work is true.
func checkArithmetic(t *testing.T, p *Problem) int {
	t.Helper()
	n := 0
	for _, m := range arithLine.FindAllStringSubmatch(p.Reasoning, -1) {
		x, _ := strconv.Atoi(m[1])
		y, _ := strconv.Atoi(m[3])
		z, _ := strconv.Atoi(m[4])
		want := map[string]int{"+": x + y, "-": x - y, "*": x * y}[m[2]]
		switch m[2] {
		case "/":
			if y == 0 || x%y != 0 {
				t.Fatalf("%s %q: inexact division %q", p.Task, p.Prompt, m[0])
			}
			want = x / y
		case "%":
			want = pyMod(x, y)
		}
		if want != z {
			t.Fatalf("%s %q: false %q in the work", p.Task, p.Prompt, m[0])
		}
		n++
	}
	return n
}

// TestV2Answers: every answer of the second set matches an independent
// solution from the prompt, every piece of arithmetic in the work is true,
// and the work ends at the answer.
func TestV2Answers(t *testing.T) {
	for _, s := range v2Sets(t) {
		for _, sp := range s.Tasks {
			for _, p := range slices.Concat(sp.Train, sp.Dev, sp.Heldout) {
				if got := solveV2(t, &p); got != p.Answer {
					t.Fatalf("%s %q: answer %q, solved %q", p.Task, p.Prompt, p.Answer, got)
				}
				if p.Task != "sort" && p.Task != "sum" && checkArithmetic(t, &p) == 0 {
					t.Fatalf("%s %q: no arithmetic in the work", p.Task, p.Prompt)
				}
				switch p.Task {
				case "sum":
					checkSumColumns(t, &p)
				case "sort":
					checkSelection(t, &p)
				case "code":
					if !strings.HasPrefix(p.Content(), "```python\ndef f(n):") {
						t.Fatalf("code content %q", p.Content())
					}
				default:
					if !strings.HasSuffix(p.Reasoning, "="+p.Answer+".") {
						t.Fatalf("%s %q: work ends %q, answer %s", p.Task, p.Prompt, p.Reasoning[max(0, len(p.Reasoning)-20):], p.Answer)
					}
				}
			}
		}
	}
}

// solveV2 solves a problem of the second set from its prompt alone.
func solveV2(t *testing.T, p *Problem) string {
	t.Helper()
	nums := func(s string) []int {
		var v []int
		for _, f := range regexp.MustCompile(`\d+`).FindAllString(s, -1) {
			n, _ := strconv.Atoi(f)
			v = append(v, n)
		}
		return v
	}
	switch p.Task {
	case "sum":
		total := 0
		for _, n := range nums(p.Prompt) {
			total += n
		}
		return strconv.Itoa(total)
	case "sort":
		_, list, _ := strings.Cut(p.Prompt, ": ")
		v := nums(list)
		slices.Sort(v)
		if strings.Contains(p.Prompt, "descending") {
			slices.Reverse(v)
		}
		return joinInts(v)
	case "ledger":
		lines := strings.Split(p.Prompt, "\n")
		stock := nums(lines[0])[0]
		for _, l := range lines[1 : len(lines)-1] {
			k := nums(l)[1]
			if strings.Contains(l, "sells") {
				stock -= k
			} else {
				stock += k
			}
			if stock < 0 || stock > 999 {
				t.Fatalf("ledger %q: stock %d", p.Prompt, stock)
			}
		}
		return strconv.Itoa(stock)
	case "word":
		return strconv.Itoa(solveWord(t, p.Prompt))
	case "code":
		// The reference against a function built from the words alone.
		for _, x := range []int{0, 2, 7, -3} {
			got, err := eval.RunFunction(p.Answer, int64(x))
			if err != nil {
				t.Fatalf("code %q: %v", p.Answer, err)
			}
			if want := applyWords(t, p.Prompt, x); got != int64(want) {
				t.Fatalf("code %q: f(%d) = %d, the words give %d", p.Prompt, x, got, want)
			}
		}
		return p.Answer
	}
	t.Fatalf("no solver for %s", p.Task)
	return ""
}

// solveWord reads a word problem sentence by sentence.
func solveWord(t *testing.T, prompt string) int {
	t.Helper()
	var n []int
	for _, f := range regexp.MustCompile(`\d+`).FindAllString(prompt, -1) {
		v, _ := strconv.Atoi(f)
		n = append(n, v)
	}
	if strings.Contains(prompt, "How many more") {
		return n[0] - n[1]
	}
	cur := 0
	for i, sent := range strings.SplitAfter(prompt, ". ") {
		var a, b int
		switch {
		case i == 0:
			fmt.Sscanf(sent[strings.Index(sent, "has ")+4:], "%d", &cur)
		case strings.Contains(sent, "bags with"):
			fmt.Sscanf(sent[strings.Index(sent, "buys ")+5:], "%d bags with %d", &a, &b)
			cur += a * b
		case strings.Contains(sent, "gives"):
			fmt.Sscanf(sent[strings.Index(sent, "gives ")+6:], "%d", &a)
			cur -= a
		case strings.Contains(sent, "finds"):
			fmt.Sscanf(sent[strings.Index(sent, "finds ")+6:], "%d", &a)
			cur += a
		case strings.Contains(sent, "among"):
			fmt.Sscanf(sent[strings.Index(sent, "among ")+6:], "%d", &a)
			if cur%a != 0 {
				t.Fatalf("word %q: %d does not share by %d", prompt, cur, a)
			}
			cur /= a
		}
	}
	return cur
}

// applyWords computes f(x) from a code task's description.
func applyWords(t *testing.T, prompt string, x int) int {
	t.Helper()
	_, steps, _ := strings.Cut(prompt, "starts from n, ")
	steps, _, _ = strings.Cut(steps, ", and returns")
	v := x
	for _, w := range strings.Split(strings.ReplaceAll(steps, "then ", ""), ", ") {
		var k int
		switch {
		case w == "doubles it":
			v *= 2
		case w == "squares it":
			v *= v
		case w == "adds n to it":
			v += x
		case strings.HasPrefix(w, "adds "):
			fmt.Sscanf(w, "adds %d", &k)
			v += k
		case strings.HasPrefix(w, "subtracts "):
			fmt.Sscanf(w, "subtracts %d", &k)
			v -= k
		case strings.HasPrefix(w, "multiplies it by "):
			fmt.Sscanf(w, "multiplies it by %d", &k)
			v *= k
		case strings.HasPrefix(w, "takes the remainder after dividing by "):
			fmt.Sscanf(w, "takes the remainder after dividing by %d", &k)
			v = pyMod(v, k)
		default:
			t.Fatalf("code %q: step %q", prompt, w)
		}
	}
	return v
}

// checkSumColumns: a column line per digit place from the right, with the
// operands' digits in order and the carry of the line before.
func checkSumColumns(t *testing.T, p *Problem) {
	t.Helper()
	ops := strings.Split(strings.TrimSuffix(strings.TrimPrefix(p.Prompt, "What is "), "?"), "+")
	work := strings.Split(p.Reasoning, "\n")
	carry := 0
	for i, l := range work[:len(work)-1] {
		terms := strings.Split(strings.Split(l[2:], "=")[0], "+")
		if l[0] != sumLabels[i] || len(terms) != len(ops)+1 {
			t.Fatalf("sum %q: line %q", p.Prompt, l)
		}
		for j, op := range ops {
			n, _ := strconv.Atoi(op)
			if terms[j] != strconv.Itoa(at(digits(n), i)) {
				t.Fatalf("sum %q: line %q takes the wrong digit of %s", p.Prompt, l, op)
			}
		}
		if terms[len(ops)] != strconv.Itoa(carry) {
			t.Fatalf("sum %q: line %q carries the wrong digit", p.Prompt, l)
		}
		s, _ := strconv.Atoi(strings.Split(l, "=")[1])
		col := 0
		for _, d := range terms {
			v, _ := strconv.Atoi(d)
			col += v
		}
		if col != s {
			t.Fatalf("sum %q: false column %q", p.Prompt, l)
		}
		carry = s / 10
	}
	if work[len(work)-1] != "="+p.Answer {
		t.Fatalf("sum %q: ends %q with carry %d", p.Prompt, work[len(work)-1], carry)
	}
}

// checkSelection: the first line copies the prompt's list, and each
// line after takes the best of what the line before left.
func checkSelection(t *testing.T, p *Problem) {
	t.Helper()
	_, list, _ := strings.Cut(p.Prompt, ": ")
	lines := strings.Split(p.Reasoning, "\n")
	if lines[0] != "list: "+list {
		t.Fatalf("sort %q: first line %q, want the list", p.Prompt, lines[0])
	}
	left := list
	var picked []string
	for _, l := range lines[1:] {
		v, rest, ok := strings.Cut(l, " | ")
		if !ok {
			t.Fatalf("sort %q: line %q", p.Prompt, l)
		}
		items := strings.Split(left, ", ")
		if !slices.Contains(items, v) {
			t.Fatalf("sort %q: %q picks %s, not among %s", p.Prompt, l, v, left)
		}
		want := strings.Join(slices.DeleteFunc(items, func(s string) bool { return s == v }), ", ")
		if want == "" {
			want = "none"
		}
		if rest != want {
			t.Fatalf("sort %q: line %q leaves %q, want %q", p.Prompt, l, rest, want)
		}
		picked, left = append(picked, v), rest
	}
	if strings.Join(picked, ", ") != p.Answer {
		t.Fatalf("sort %q: picked %v, answer %s", p.Prompt, picked, p.Answer)
	}
}

// TestV2Shapes: the second set has what the first lacks: answers of many
// widths and list lengths, long work at the GPU size (the ledger's work
// runs past 500 characters, about 400 tokens), short enough work at the
// CPU size for 512-token sequences; and scores its answers: the held-out
// items carry the formats eval needs, and eval scores each reference
// answer right.
func TestV2Shapes(t *testing.T) {
	for _, s := range v2Sets(t) {
		widths := map[string]map[int]bool{}
		longest := map[string]int{}
		for _, sp := range s.Tasks {
			widths[sp.Task.Name] = map[int]bool{}
			for _, p := range sp.Train {
				widths[sp.Task.Name][len(p.Answer)] = true
				longest[sp.Task.Name] = max(longest[sp.Task.Name], len(p.Prompt)+len(p.Reasoning)+len(p.Content()))
			}
		}
		for _, task := range []string{"sum", "sort", "ledger", "word"} {
			if len(widths[task]) < 3 {
				t.Errorf("%s %s: answers of %d widths only", s.Size.Name, task, len(widths[task]))
			}
		}
		for task, n := range longest {
			if s.Size.Name == "cpu" && n > 600 {
				t.Errorf("cpu %s: a problem of %d characters will not fit 512 tokens", task, n)
			}
		}
		if s.Size.Name == "gpu" && longest["ledger"] < 1200 {
			t.Errorf("gpu ledger: longest problem %d characters, want long work", longest["ledger"])
		}
		for _, it := range s.EvalRecords() {
			if want := map[string]string{"sort": eval.FormatList, "code": eval.FormatProgram}[it.Task]; it.Format != want {
				t.Fatalf("%s item format %q", it.Task, it.Format)
			}
			var p *Problem
			for _, sp := range s.Tasks {
				for i := range sp.Heldout {
					if sp.Heldout[i].Prompt == it.Messages[0].Content {
						p = &sp.Heldout[i]
					}
				}
			}
			got, ok := eval.ExtractFor(&it, p.Content(), p.Reasoning)
			if !ok || !eval.Correct(&it, got) {
				t.Fatalf("%s: the reference reply %q does not score (extracted %q)", it.Task, p.Content(), got)
			}
		}
	}
}

// TestDevSplit: dev problems are disjoint from held-out and train ones,
// and adding a dev split changes neither the held-out split nor anything
// but which training problems are drawn.
func TestDevSplit(t *testing.T) {
	a := mustGenerate(t, Options{Tasks: []string{"v2"}, Train: 500, Dev: 100, Heldout: 100, Seed: 9})
	b := mustGenerate(t, Options{Tasks: []string{"v2"}, Train: 500, Heldout: 100, Seed: 9})
	for i, sp := range a.Tasks {
		held := map[[32]byte]bool{}
		for _, p := range sp.Heldout {
			held[Hash(&p)] = true
		}
		dev := map[[32]byte]bool{}
		for _, p := range sp.Dev {
			if held[Hash(&p)] {
				t.Fatalf("%s: dev problem %q is held out", sp.Task.Name, p.Canonical)
			}
			dev[Hash(&p)] = true
		}
		for _, p := range sp.Train {
			if held[Hash(&p)] || dev[Hash(&p)] {
				t.Fatalf("%s: training problem %q is held out or dev", sp.Task.Name, p.Canonical)
			}
		}
		if len(sp.Dev) != 100 {
			t.Fatalf("%s: %d dev problems", sp.Task.Name, len(sp.Dev))
		}
		for j := range sp.Heldout {
			if sp.Heldout[j].Prompt != b.Tasks[i].Heldout[j].Prompt {
				t.Fatalf("%s: the held-out split changed with the dev count", sp.Task.Name)
			}
		}
	}
}

// TestStories: the plain text is deterministic, varied and plain.
func TestStories(t *testing.T) {
	a, b := stories(1, 200), stories(1, 200)
	if !slices.Equal(a, b) {
		t.Fatal("stories differ for one seed")
	}
	seen := map[string]bool{}
	for _, s := range a {
		if len(s) < 150 || strings.ContainsAny(s, "%{}") {
			t.Fatalf("story %q", s)
		}
		seen[s] = true
	}
	if len(seen) < 195 {
		t.Errorf("only %d different stories of 200", len(seen))
	}
}
