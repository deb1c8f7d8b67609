package synth

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// traceVars name a program's variables in order; each statement assigns a
// new one, so the work finds a statement by its variable's name.
const traceVars = "abcd"

// traceMin and traceMax bound every value a traced program holds: two
// digits, so that each step is arithmetic a tiny model can do in one line
// and every value, the answer included, has one width.
const (
	traceMin = 10
	traceMax = 99
)

// traceLen is the number of statements of a traced program. One length
// keeps each statement at the same distance from the line of work that runs
// it; with 3 or 4 statements a tiny teacher often took the operator or the
// constant from the wrong statement.
const traceLen = 4

// genTrace writes a chain of four assignments over the variables a, b, c,
// d (a 2-digit constant first, then each from the one before with +, - or
// * a constant) whose values stay in 10..99, and asks for the last one's
// value. The work runs each statement, "c=17*2=34", so every line has the
// same shape.
func genTrace(r *rand.Rand) Problem {
	for {
		v := traceMin + r.IntN(traceMax-traceMin+1)
		src := []string{fmt.Sprintf("a=%d", v)}
		work := []string{fmt.Sprintf("a=%d", v)}
		vals := []int{v}
		ok := true
		for i := 1; i < traceLen; i++ {
			op := "+-*"[r.IntN(3)]
			k := 1 + r.IntN(9)
			z := v + k
			switch op {
			case '-':
				z = v - k
			case '*':
				k = 2 + r.IntN(2)
				z = v * k
			}
			if z < traceMin || z > traceMax {
				ok = false
				break
			}
			src = append(src, fmt.Sprintf("%c=%c%c%d", traceVars[i], traceVars[i-1], op, k))
			work = append(work, fmt.Sprintf("%c=%d%c%d=%d", traceVars[i], v, op, k, z))
			v = z
			vals = append(vals, v)
		}
		if !ok {
			continue
		}
		q := traceLen - 1
		code := strings.Join(src, "\n")
		return Problem{
			Canonical: fmt.Sprintf("trace:%s:%c", strings.ReplaceAll(code, "\n", ";"), traceVars[q]),
			Prompt:    fmt.Sprintf("%s\nWhat is %c?", code, traceVars[q]),
			Reasoning: strings.Join(work, "\n"),
			Answer:    strconv.Itoa(vals[q]),
		}
	}
}
