package eval

import "testing"

func TestNormalizeNumber(t *testing.T) {
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"1234", "1234", true},
		{" 1,234 ", "1234", true},
		{"007", "7", true},
		{"+5", "5", true},
		{"-0", "0", true},
		{"-12", "-12", true},
		{"−12", "-12", true},
		{"12.50", "12.5", true},
		{"12.0", "12", true},
		{".5", "0.5", true},
		{"$40", "40", true},
		{"", "", false},
		{"12a", "", false},
		{"1.2.3", "", false},
		{".", "", false},
		{"C", "", false},
	}
	for _, c := range cases {
		got, ok := NormalizeNumber(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("NormalizeNumber(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestExtract(t *testing.T) {
	cases := []struct {
		name, content, reasoning, want string
		ok                             bool
	}{
		{"content", "Answer: 1234", "", "1234", true},
		{"last in content", "Answer: 1\nno wait\nAnswer: 2", "", "2", true},
		{"markdown", "**Answer:** C", "", "C", true},
		{"case", "the answer: 42.", "", "42.", true},
		{"reasoning fallback", "", "7+5=12\nAnswer: 12", "12", true},
		{"content wins", "Answer: 3", "Answer: 4", "3", true},
		{"bare short content", " 1234 ", "", "1234", true},
		{"think tags in content", "<think>\n1+1=2\n</think>\n\nAnswer: 2", "", "2", true},
		{"nothing", "I cannot\ndo that", "", "", false},
		{"empty answer", "Answer: ", "", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Extract(c.content, c.reasoning)
			if got != c.want || ok != c.ok {
				t.Errorf("got %q, %v; want %q, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestCorrect(t *testing.T) {
	num := &Item{Answer: "1234"}
	mcq := &Item{Answer: "C", Choices: []string{"1", "2", "3", "4"}}
	text := &Item{Answer: "Paris"}
	cases := []struct {
		it   *Item
		got  string
		want bool
	}{
		{num, "1234", true},
		{num, "1,234", true},
		{num, "01234.", true},
		{num, "1234 (after carrying)", true},
		{num, "1243", false},
		{num, "", false},
		{mcq, "C", true},
		{mcq, "(c)", true},
		{mcq, "C) 3", true},
		{mcq, "B", false},
		{mcq, "Cat", false},
		{mcq, "$C$", true},
		{mcq, `\boxed{C}`, true},
		{mcq, `\textbf{C}`, true},
		{text, " paris ", true},
		{text, "Lyon", false},
	}
	for _, c := range cases {
		if got := Correct(c.it, c.got); got != c.want {
			t.Errorf("Correct(answer %q, got %q) = %v", c.it.Answer, c.got, got)
		}
	}
}

// Multiple choice reads simple-evals' "Answer: X", then MMLU-Pro's
// fallbacks; a letter outside the choices is no answer.
func TestExtractChoice(t *testing.T) {
	it := &Item{Answer: "B", Choices: []string{"w", "x", "y", "z"}}
	cases := []struct{ content, reasoning, want string }{
		{"Answer: B", "", "B"},
		{"Answer: A\nwait.\n**Answer:** $C$", "", "C"},
		{"", "so\nAnswer: D", "D"},
		{"Answer: 42\nThe answer is (B).", "", "B"},
		{"The answer is (C), not the answer is (A)", "", "C"},
		{"I pick D over A", "", "A"},
		{"Answer: F", "", ""},
		{"it is F or G", "", ""},
		{"no letter here", "", ""},
		{"", "thinking... I believe B", "B"},
	}
	for _, c := range cases {
		got, ok := ExtractFor(it, c.content, c.reasoning)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%q, %q: %q, %v; want %q", c.content, c.reasoning, got, ok, c.want)
		}
	}
}

// A "math" item reads the last \boxed{} (content first, then reasoning,
// then an "Answer:" line) and scores it with MathEqual.
func TestMathFormat(t *testing.T) {
	it := &Item{ID: "m", Task: "math", Messages: []Message{{Role: "user", Content: "x"}}, Answer: `\frac{1}{2}`, Format: FormatMath}
	if err := it.check(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		content, reasoning string
		got                string
		correct            bool
	}{
		{`So it is \boxed{0.5}.`, "", "0.5", true},
		{`First \boxed{3}, then \boxed{\dfrac12}`, "", `\dfrac12`, true},
		{"The answer is below.", `\boxed{\frac{2}{4}}`, `\frac{2}{4}`, true},
		{"Answer: 1/2", "", "1/2", true},
		{`\boxed{\frac{1}{3}}`, "", `\frac{1}{3}`, false},
		{"no answer here", "", "", false},
	}
	for _, c := range cases {
		got, ok := ExtractFor(it, c.content, c.reasoning)
		if got != c.got || ok != (c.got != "") {
			t.Errorf("ExtractFor(%q, %q) = %q, %v; want %q", c.content, c.reasoning, got, ok, c.got)
		}
		if ok && Correct(it, got) != c.correct {
			t.Errorf("Correct(%q) = %v, want %v", got, !c.correct, c.correct)
		}
	}
}
