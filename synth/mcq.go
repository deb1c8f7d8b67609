package synth

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// letters label the options of a multiple-choice problem.
const letters = "ABCD"

// sortedKey is a canonical spelling of a set of options, whatever their order.
func sortedKey(opts []int) string {
	s := slices.Clone(opts)
	slices.Sort(s)
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

// genMCQ asks which of four distinct 2-digit numbers is the largest (or the
// smallest). The work keeps a running best, one fixed-width line per
// option: "C=64 64 C" quotes option C (found by its letter), then the best
// value and letter so far, which the next line compares against.
func genMCQ(r *rand.Rand) Problem {
	opts := make([]int, 0, 4)
	for len(opts) < 4 {
		if v := 10 + r.IntN(90); !slices.Contains(opts, v) {
			opts = append(opts, v)
		}
	}
	largest := r.IntN(2) == 0
	word, kind := "largest", "max"
	if !largest {
		word, kind = "smallest", "min"
	}
	lines := []string{"Which is " + word + "?"}
	texts := make([]string, len(opts))
	for i, v := range opts {
		texts[i] = strconv.Itoa(v)
		lines = append(lines, fmt.Sprintf("%c) %d", letters[i], v))
	}
	best := 0
	var work []string
	for i, v := range opts {
		if i > 0 && (v > opts[best]) == largest {
			best = i
		}
		work = append(work, fmt.Sprintf("%c=%d %d %c", letters[i], v, opts[best], letters[best]))
	}
	return Problem{
		Canonical: "mcq:" + kind + ":" + sortedKey(opts),
		Prompt:    strings.Join(lines, "\n"),
		Reasoning: strings.Join(work, "\n"),
		Answer:    string(letters[best]),
		Choices:   texts,
	}
}
