package synth

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// sumLabels name the columns of a many-term sum from the right: units,
// tens, hundreds, thousands, ten-thousands, and one more for the last
// carry.
const sumLabels = "uthoxy"

// genSum asks for the sum of 2-4 numbers of 1-4 digits (by size), so the
// answer has any width from one digit to five: what a block-diffusion
// model must learn that the first set's one-width answers spared it. The
// work adds column by column from the right, a line per column with the
// column's digits (0 where a number has none), the carry in and the
// column sum, "t 3+0+8+1=12"; then "=1242".
func genSum(r *rand.Rand, s Size) Problem {
	k := between(r, s.SumTerms)
	nums := make([]int, k)
	for i := range nums {
		nums[i] = randDigits(r, s.SumDigits[0], s.SumDigits[1])
	}
	total := 0
	for _, n := range nums {
		total += n
	}
	ds := make([][]int, k)
	width := 0
	for i, n := range nums {
		ds[i] = digits(n)
		width = max(width, len(ds[i]))
	}
	var work []string
	carry := 0
	for col := range width {
		terms := make([]string, 0, k+1)
		c := carry
		for i := range nums {
			d := at(ds[i], col)
			terms = append(terms, strconv.Itoa(d))
			c += d
		}
		terms = append(terms, strconv.Itoa(carry))
		work = append(work, fmt.Sprintf("%c %s=%d", sumLabels[col], strings.Join(terms, "+"), c))
		carry = c / 10
	}
	work = append(work, "="+strconv.Itoa(total))
	parts := make([]string, k)
	for i, n := range nums {
		parts[i] = strconv.Itoa(n)
	}
	sorted := slices.Clone(nums)
	slices.Sort(sorted)
	canon := make([]string, k)
	for i, n := range sorted {
		canon[i] = strconv.Itoa(n)
	}
	return Problem{
		Canonical: "sum:" + strings.Join(canon, "+"),
		Prompt:    "What is " + strings.Join(parts, "+") + "?",
		Reasoning: strings.Join(work, "\n"),
		Answer:    strconv.Itoa(total),
	}
}
