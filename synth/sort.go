package synth

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// genSort asks for a list of distinct numbers (3-4 of 1-2 digits at the
// CPU size, 3-6 of 1-3 at the GPU size)
// sorted up or down; the answer is the list, "7, 19, 42, 319". The work
// first copies the list, "list: 42, 7, 319, 19", then runs selection
// sort: a line per pick, the number taken and what is left, "19 | 42,
// 319", so each line finds its candidates in the line above. Without the
// copy, the first pick was the one line that read the prompt, and most of
// the teachers' sort errors were there (a wrong pick, or the rest copied
// with a number changed).
func genSort(r *rand.Rand, s Size) Problem {
	n := between(r, s.SortLen)
	nums := make([]int, 0, n)
	for len(nums) < n {
		if v := randDigits(r, s.SortDigits[0], s.SortDigits[1]); !slices.Contains(nums, v) {
			nums = append(nums, v)
		}
	}
	up := r.IntN(2) == 0
	word, pick := "ascending", slices.Min[[]int]
	if !up {
		word, pick = "descending", slices.Max[[]int]
	}
	left := slices.Clone(nums)
	work := []string{"list: " + joinInts(nums)}
	var out []string
	for len(left) > 0 {
		v := pick(left)
		left = slices.DeleteFunc(left, func(x int) bool { return x == v })
		out = append(out, strconv.Itoa(v))
		rest := "none"
		if len(left) > 0 {
			rest = joinInts(left)
		}
		work = append(work, strconv.Itoa(v)+" | "+rest)
	}
	sorted := slices.Clone(nums)
	slices.Sort(sorted)
	return Problem{
		Canonical: "sort:" + word + ":" + joinInts(sorted),
		Prompt:    "Sort in " + word + " order: " + joinInts(nums),
		Reasoning: strings.Join(work, "\n"),
		Answer:    strings.Join(out, ", "),
	}
}

// joinInts writes numbers as "a, b, c".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
