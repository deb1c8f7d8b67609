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
// smallest). The work is one line per option that compares it with the best
// so far and names the best after it: ">C 64" says option C is greater than
// the best before it, so C, 64 is the best now ("=A ..." for the first
// option, compared with itself). The lines have the prompt's option lines'
// width in tokens ("C) 64"), so line i finds option i's value at the same
// distance for every i, and the previous best right above: a tiny model
// learns a fixed distance fast but finding a line by its letter slowly.
// First versions that restated each option ("C=64 64 C", "C) 64>58") left
// a 330k-parameter teacher at 30-55% after the same budget.
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
		prev := opts[best]
		sym := '='
		switch {
		case v > prev:
			sym = '>'
		case v < prev:
			sym = '<'
		}
		if v != prev && (v > prev) == largest {
			best = i
		}
		work = append(work, fmt.Sprintf("%c%c %d", sym, letters[best], opts[best]))
	}
	return Problem{
		Canonical: "mcq:" + kind + ":" + sortedKey(opts),
		Prompt:    strings.Join(lines, "\n"),
		Reasoning: strings.Join(work, "\n"),
		Answer:    string(letters[best]),
		Choices:   texts,
	}
}
