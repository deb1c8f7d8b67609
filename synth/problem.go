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
	// Answer is the exact final answer: digits, or a choice letter.
	Answer string
	// Choices are the option texts of a multiple-choice problem, in the
	// order they are lettered A, B, ...; nil otherwise.
	Choices []string
}

// Content is the assistant's final message: the answer after AnswerPrefix.
func (p *Problem) Content() string { return AnswerPrefix + p.Answer }

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
	gen    func(r *rand.Rand) Problem
}

// Generate draws one problem from r.
func (t *Task) Generate(r *rand.Rand) Problem {
	p := t.gen(r)
	p.Task = t.Name
	return p
}

// tasks is every task, in the default order.
var tasks = []*Task{
	{Name: "add", Description: "4-digit sum of two 3-digit numbers, column addition with carries", Chance: 0, Format: FormatNumber, gen: genAdd},
	{Name: "mul", Description: "4-digit product of a 3-digit number and a digit 2-9: a partial-product row of long multiplication, digit by digit with carries", Chance: 0, Format: FormatNumber, gen: genMul},
	{Name: "mcq", Description: "which of four 2-digit numbers is the largest (or smallest), by running comparison", Chance: 0.25, Format: FormatLetter, gen: genMCQ},
	{Name: "trace", Description: "final value of a chain of four assignments of 2-digit values (a=14, b=a+3, c=b*2, d=c-5)", Chance: 0, Format: FormatNumber, gen: genTrace},
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
