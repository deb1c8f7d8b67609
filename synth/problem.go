package synth

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Answer formats, as recorded in tasks.json and used by `dllm eval`.
const (
	// FormatNumber is an integer written in decimal ("Answer: 1234").
	FormatNumber = "number"
	// FormatLetter is a choice letter ("Answer: C").
	FormatLetter = "letter"
	// FormatList is integers separated by commas ("Answer: 7, 19, 42").
	FormatList = "list"
	// FormatProgram is a Python function in a fenced code block, scored
	// by running it against the reference (eval.RunFunction).
	FormatProgram = "program"
)

// AnswerPrefix starts the final answer in an assistant's content.
const AnswerPrefix = "Answer: "

// Problem is one generated question with its worked solution.
type Problem struct {
	// Task is the generating task's name.
	Task string
	// Canonical identifies the problem regardless of presentation (operand
	// order of a commutative operation, option order); equal canonical forms
	// are the same problem for the split.
	Canonical string
	// Prompt is the user message.
	Prompt string
	// Reasoning is the step-by-step work (the assistant's reasoning_content).
	Reasoning string
	// Answer is the exact final answer: digits, a choice letter, a list,
	// or for FormatProgram the reference program.
	Answer string
	// Choices are the option texts of a multiple-choice problem, in the
	// order they are lettered A, B, ...; nil otherwise.
	Choices []string
}

// Content is the assistant's final message: the answer after AnswerPrefix,
// or for a task whose answers are programs, the program in a fenced code
// block.
func (p *Problem) Content() string {
	if t, err := Lookup(p.Task); err == nil && t.Format == FormatProgram {
		return "```python\n" + p.Answer + "\n```"
	}
	return AnswerPrefix + p.Answer
}

// Size scales the families of the second task set: the lengths of their
// problems. The first set's tasks have one size.
type Size struct {
	// Name is "cpu" or "gpu".
	Name string
	// SumTerms, SortLen, LedgerDays, CodeOps and WordSteps bound (min, max)
	// a problem's terms, list length, days, operations and word-problem
	// steps.
	SumTerms, SortLen, LedgerDays, CodeOps, WordSteps [2]int
	// SumDigits and SortDigits bound a sum operand's and a sorted number's
	// digits.
	SumDigits, SortDigits [2]int
}

// Sizes are the two problem sizes: the CPU proxy's, short enough for
// 512-token sequences and a 330k-parameter teacher, and the GPU proxy's,
// whose ledgers run to about a thousand tokens of work.
var Sizes = map[string]Size{
	"cpu": {Name: "cpu", SumTerms: [2]int{2, 2}, SumDigits: [2]int{1, 3}, SortLen: [2]int{3, 4}, SortDigits: [2]int{1, 2}, LedgerDays: [2]int{2, 5}, CodeOps: [2]int{2, 3}, WordSteps: [2]int{1, 1}},
	"gpu": {Name: "gpu", SumTerms: [2]int{2, 4}, SumDigits: [2]int{1, 4}, SortLen: [2]int{3, 6}, SortDigits: [2]int{1, 3}, LedgerDays: [2]int{8, 30}, CodeOps: [2]int{2, 5}, WordSteps: [2]int{1, 3}},
}

// between draws an int in [b[0], b[1]].
func between(r *rand.Rand, b [2]int) int { return b[0] + r.IntN(b[1]-b[0]+1) }

// Task is a problem generator with its scoring facts.
type Task struct {
	// Name is the id used in flags and files.
	Name string
	// Description says what the task asks, for tasks.json.
	Description string
	// Chance is the expected accuracy of guessing.
	Chance float64
	// Format is FormatNumber or FormatLetter.
	Format string
	gen    func(r *rand.Rand, s Size) Problem
}

// Generate draws one problem of size s from r.
func (t *Task) Generate(r *rand.Rand, s Size) Problem {
	p := t.gen(r, s)
	p.Task = t.Name
	return p
}

// sized adapts a generator of the first set, which has one size.
func sized(gen func(r *rand.Rand) Problem) func(*rand.Rand, Size) Problem {
	return func(r *rand.Rand, _ Size) Problem { return gen(r) }
}

// tasks is every task: the first set (one width per answer, short work),
// then the second (free widths, lists, long work, prose, code).
var tasks = []*Task{
	{Name: "add", Description: "4-digit sum of two 3-digit numbers, column addition with carries", Chance: 0, Format: FormatNumber, gen: sized(genAdd)},
	{Name: "mul", Description: "4-digit product of a 3-digit number and a digit 2-9: a partial-product row of long multiplication, digit by digit with carries", Chance: 0, Format: FormatNumber, gen: sized(genMul)},
	{Name: "mcq", Description: "which of four 2-digit numbers is the largest (or smallest), by running comparison", Chance: 0.25, Format: FormatLetter, gen: sized(genMCQ)},
	{Name: "trace", Description: "final value of a chain of four assignments of 2-digit values (a=14, b=a+3, c=b*2, d=c-5)", Chance: 0, Format: FormatNumber, gen: sized(genTrace)},
	{Name: "sum", Description: "sum of 2-4 numbers of 1-4 digits, column by column: answers of any width", Chance: 0, Format: FormatNumber, gen: genSum},
	{Name: "sort", Description: "a list of distinct numbers of 1-3 digits sorted up or down, by repeated selection: the answer is a list", Chance: 0, Format: FormatList, gen: genSort},
	{Name: "ledger", Description: "a stock counted through many days of sales and deliveries, in prose: the longest work", Chance: 0, Format: FormatNumber, gen: genLedger},
	{Name: "word", Description: "word problems in prose (bags, sharing, losing and finding, comparing)", Chance: 0, Format: FormatNumber, gen: genWord},
	{Name: "code", Description: "a Python function from a description in words, scored by running it", Chance: 0, Format: FormatProgram, gen: genCode},
}

// TaskSets name groups of tasks for --tasks: v1, the first proxy's tasks,
// and v2, the second's.
var TaskSets = map[string][]string{
	"v1": {"add", "mul", "mcq", "trace"},
	"v2": {"sum", "sort", "ledger", "word", "code"},
}

// Tasks returns every task in the default order.
func Tasks() []*Task { return append([]*Task(nil), tasks...) }

// TaskNames returns the names of every task in the default order.
func TaskNames() []string {
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[i] = t.Name
	}
	return names
}

// Lookup returns the task called name.
func Lookup(name string) (*Task, error) {
	for _, t := range tasks {
		if t.Name == name {
			return t, nil
		}
	}
	return nil, fmt.Errorf("synth: unknown task %q (have %s)", name, strings.Join(TaskNames(), ", "))
}
