package eval

import (
	"strings"
	"testing"
)

// TestRunFunction: the subset runs as Python would (values from CPython
// for the floor division and modulo of negative numbers), and everything
// outside it is an error, never a guess.
func TestRunFunction(t *testing.T) {
	cases := []struct {
		name, src string
		arg       int64
		want      int64
		err       string
	}{
		{"steps", "def f(n):\n    a = n * 3\n    b = a + 7\n    c = b * b\n    return c", 2, 169, ""},
		{"one line", "def f(n):\n    return (n + 1) * (n - 1)", 5, 24, ""},
		{"precedence", "def f(n):\n    return 2 + n * 3 - 4 // 2", 5, 15, ""},
		{"floor division", "def f(n):\n    return n // 4", -7, -2, ""},
		{"modulo", "def f(n):\n    return n % 3", -7, 2, ""},
		{"modulo by a negative", "def f(n):\n    return n % -3", 7, -2, ""},
		{"unary minus", "def f(n):\n    return -n * -2", 3, 6, ""},
		{"comments and blanks", "# the task\ndef f(x):  # x is n\n\n    y = x+1  # step\n    return y", 1, 2, ""},
		{"reassignment", "def f(n):\n    n = n + 1\n    n = n * n\n    return n", 2, 9, ""},
		{"no return", "def f(n):\n    a = n", 1, 0, "never returns"},
		{"undefined", "def f(n):\n    return m", 1, 0, "not defined"},
		{"import", "import os\ndef f(n):\n    return n", 1, 0, "line 1"},
		{"call", "def f(n):\n    return abs(n)", 1, 0, "not defined"},
		{"power", "def f(n):\n    return n ** 2", 1, 0, "not supported"},
		{"division", "def f(n):\n    return n / 2", 1, 0, "not supported"},
		{"by zero", "def f(n):\n    return n // (n - 1)", 1, 0, "division by zero"},
		{"overflow", "def f(n):\n    a = n * 1000000000\n    return a * a * a", 9, 0, "too large"},
		{"two arguments", "def f(a, b):\n    return a", 1, 0, "takes 2 arguments"},
		{"outside", "def f(n):\nreturn n", 1, 0, "outside the function"},
		{"comparison", "def f(n):\n    a == n\n    return a", 1, 0, "neither"},
		{"empty", "", 1, 0, "empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := RunFunction(c.src, c.arg)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %d, %v; want an error with %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %d, %v; want %d", got, err, c.want)
			}
		})
	}
}

// TestProgramAndListAnswers: program answers are read from the last code
// block and scored by running them, so another correct program passes;
// list answers compare number by number.
func TestProgramAndListAnswers(t *testing.T) {
	ref := "def f(n):\n    a = n * 2\n    b = a + 3\n    return b"
	prog := &Item{ID: "c", Task: "code", Messages: []Message{{Role: "user", Content: "x"}}, Answer: ref, Format: FormatProgram}
	list := &Item{ID: "s", Task: "sort", Messages: []Message{{Role: "user", Content: "x"}}, Answer: "7, 19, 42", Format: FormatList}
	cases := []struct {
		name    string
		it      *Item
		content string
		want    bool
	}{
		{"the reference", prog, "```python\n" + ref + "\n```", true},
		{"another correct program", prog, "Here:\n```\ndef f(x):\n    return 3 + 2 * x\n```", true},
		{"the last block counts", prog, "```python\ndef f(n):\n    return n\n```\nfixed:\n```python\ndef f(n):\n    return 2*n+3\n```", true},
		{"without a fence", prog, "def f(n):\n    return n * 2 + 3", true},
		{"wrong on some input", prog, "```python\ndef f(n):\n    return n * n + 3\n```", false},
		{"not in the subset", prog, "```python\ndef f(n):\n    return int(2*n+3)\n```", false},
		{"no code", prog, "Answer: 7", false},
		{"list", list, "Answer: 7, 19, 42", true},
		{"list without spaces", list, "Answer: 7,19,42.", true},
		{"list in another order", list, "Answer: 19, 7, 42", false},
		{"list too short", list, "Answer: 7, 19", false},
		{"list with words", list, "Answer: 7, 19 and 42", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ExtractFor(c.it, c.content, "")
			if ok && c.it.check() != nil {
				t.Fatal(c.it.check())
			}
			if r := ok && Correct(c.it, got); r != c.want {
				t.Fatalf("scored %v (extracted %q, %v), want %v", r, got, ok, c.want)
			}
		})
	}
	bad := &Item{ID: "b", Task: "code", Messages: []Message{{Role: "user", Content: "x"}}, Answer: "print(1)", Format: FormatProgram}
	if err := bad.check(); err == nil {
		t.Error("an item whose reference does not run passed the check")
	}
	if err := (&Item{ID: "u", Task: "t", Messages: prog.Messages, Answer: "1", Format: "json"}).check(); err == nil {
		t.Error("an unknown format passed the check")
	}
}

// FuzzRunFunction: any text is a value or an error, never a panic or a
// hang (model replies are arbitrary).
func FuzzRunFunction(f *testing.F) {
	for _, s := range []string{"def f(n):\n    a = n * 3\n    return a % 7", "def f(n):\n    return ((n))", "def f(n):\n    return -(-n // -2)", "def f():\n    return 1", "def f(n)\n"} {
		f.Add(s, int64(3))
	}
	f.Fuzz(func(t *testing.T, src string, n int64) {
		RunFunction(src, n)
		extractProgram(src)
	})
}
