package synth

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// codeOp is one step of a code task: how the prompt says it, the Python
// expression it makes of the previous value (%s), and its value.
type codeOp struct {
	words string
	expr  string
	apply func(prev, n int) int
}

// codeOp1 draws one step.
func codeOp1(r *rand.Rand) codeOp {
	k := 2 + r.IntN(8)
	switch r.IntN(7) {
	case 0:
		return codeOp{fmt.Sprintf("adds %d", k), "%s + " + fmt.Sprint(k), func(p, _ int) int { return p + k }}
	case 1:
		return codeOp{fmt.Sprintf("subtracts %d", k), "%s - " + fmt.Sprint(k), func(p, _ int) int { return p - k }}
	case 2:
		return codeOp{fmt.Sprintf("multiplies it by %d", k), "%s * " + fmt.Sprint(k), func(p, _ int) int { return p * k }}
	case 3:
		return codeOp{"doubles it", "%s * 2", func(p, _ int) int { return p * 2 }}
	case 4:
		return codeOp{"squares it", "%[1]s * %[1]s", func(p, _ int) int { return p * p }}
	case 5:
		return codeOp{"adds n to it", "%s + n", func(p, n int) int { return p + n }}
	}
	return codeOp{fmt.Sprintf("takes the remainder after dividing by %d", k), "%s %% " + fmt.Sprint(k), func(p, _ int) int { return pyMod(p, k) }}
}

// pyMod is Python's %: the remainder has the divisor's sign.
func pyMod(a, b int) int {
	m := a % b
	if m != 0 && (m < 0) != (b < 0) {
		m += b
	}
	return m
}

// codeCheckInput is the argument the work tries the function on.
const codeCheckInput = 2

// genCode asks for a Python function f(n) that applies 2-5 steps (by
// size) said in words ("multiplies it by 3, adds 7, then squares it") and
// returns the result. The answer is the function, one assignment a step,
// in a fenced code block; `dllm eval` scores it by running it (eval's
// RunFunction) against the reference on several inputs, so any correct
// function passes. The work tries it on n = 2: "f(2): 2*3=6, 6+7=13, ...".
func genCode(r *rand.Rand, s Size) Problem {
	n := between(r, s.CodeOps)
	ops := make([]codeOp, n)
	words := make([]string, n)
	squares := 0
	for i := range ops {
		// One square at most: two could outgrow what eval runs on its
		// test inputs.
		for ops[i] = codeOp1(r); ops[i].words == "squares it" && squares > 0; ops[i] = codeOp1(r) {
		}
		if ops[i].words == "squares it" {
			squares++
		}
		words[i] = ops[i].words
	}
	said := strings.Join(words[:n-1], ", ") + ", then " + words[n-1]
	code := []string{"def f(n):"}
	prev, val := "n", codeCheckInput
	var check []string
	for i, op := range ops {
		v := string(rune('a' + i))
		expr := fmt.Sprintf(op.expr, prev)
		code = append(code, fmt.Sprintf("    %s = %s", v, expr))
		next := op.apply(val, codeCheckInput)
		check = append(check, fmt.Sprintf("%s=%d", strings.ReplaceAll(strings.ReplaceAll(fmt.Sprintf(op.expr, fmt.Sprint(val)), " ", ""), "n", fmt.Sprint(codeCheckInput)), next))
		prev, val = v, next
	}
	code = append(code, "    return "+prev)
	return Problem{
		Canonical: "code:" + strings.Join(words, ";"),
		Prompt:    fmt.Sprintf("Write a Python function f(n) that starts from n, %s, and returns the result.", said),
		Reasoning: fmt.Sprintf("f(%d): %s.", codeCheckInput, strings.Join(check, ", ")),
		Answer:    strings.Join(code, "\n"),
	}
}
