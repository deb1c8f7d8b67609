package synth

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// placeLabels name the columns of a worked sum or product from the right:
// units, tens, hundreds, thousands. Each line of work starts with its
// column's label so that a tiny model can find the digits it needs by
// content (the label) rather than by counting positions, which it learns
// far more slowly.
const placeLabels = "utho"

// digits returns n's decimal digits, least significant first.
func digits(n int) []int {
	if n == 0 {
		return []int{0}
	}
	var d []int
	for ; n > 0; n /= 10 {
		d = append(d, n%10)
	}
	return d
}

// randDigits draws a number of lo..hi digits (the digit count uniform),
// without leading zeros.
func randDigits(r *rand.Rand, lo, hi int) int {
	n := lo + r.IntN(hi-lo+1)
	min := 1
	for range n - 1 {
		min *= 10
	}
	return min + r.IntN(9*min)
}

func at(d []int, i int) int {
	if i < len(d) {
		return d[i]
	}
	return 0
}

// columnAdd writes the column addition of a and b, one fixed-width line per
// column from the right, "<place> x+y+c=ss" (ss the two-digit column sum:
// its last digit is written, its first carried into the next column), then
// "=sum".
func columnAdd(a, b int) []string {
	da, db := digits(a), digits(b)
	var lines []string
	carry := 0
	for i := range max(len(da), len(db)) {
		x, y := at(da, i), at(db, i)
		s := x + y + carry
		lines = append(lines, fmt.Sprintf("%c %d+%d+%d=%02d", placeLabels[i], x, y, carry, s))
		carry = s / 10
	}
	return append(lines, "="+strconv.Itoa(a+b))
}

// genAdd asks for a+b with 3-digit operands whose sum has 4 digits. One
// width keeps every digit at the same distance from where the work needs
// it, which is what lets a tiny model learn the task in minutes; and a sum
// of one width tells a diffusion model, which fills a block of positions
// at once, where the answer ends (a sum of 3 or 4 digits, depending on the
// last carry, left every later position in its block in doubt).
func genAdd(r *rand.Rand) Problem {
	a, b := randDigits(r, 3, 3), randDigits(r, 3, 3)
	for a+b < 1000 {
		a, b = randDigits(r, 3, 3), randDigits(r, 3, 3)
	}
	return Problem{
		Canonical: fmt.Sprintf("add:%d+%d", min(a, b), max(a, b)),
		Prompt:    fmt.Sprintf("What is %d+%d?", a, b),
		Reasoning: strings.Join(columnAdd(a, b), "\n"),
		Answer:    strconv.Itoa(a + b),
	}
}

// digitProduct writes a times the digit d, one fixed-width line per digit
// of a from the right, "<place> x*d=pp+c=ss" (pp the digit product, ss it
// plus the carry, both two digits: the last written, the first carried),
// then "=product": one partial-product row of long multiplication. The
// product and the carry are two steps because x*d+c in one is a table of
// 720 facts that a tiny model learns far more slowly than the 80 of x*d and
// the regular "add a digit" after it.
func digitProduct(a, d int) []string {
	var lines []string
	carry := 0
	for i, x := range digits(a) {
		s := x*d + carry
		lines = append(lines, fmt.Sprintf("%c %d*%d=%02d+%d=%02d", placeLabels[i], x, d, x*d, carry, s))
		carry = s / 10
	}
	return append(lines, "="+strconv.Itoa(a*d))
}

// genMul asks for a*d, a of 3 digits and d a digit 2..9, whose product has
// 4 digits (one width, as for genAdd): the partial-product row of long
// multiplication, digit by digit with carries. There are 6,169 such
// problems.
func genMul(r *rand.Rand) Problem {
	a, d := randDigits(r, 3, 3), 2+r.IntN(8)
	for a*d < 1000 {
		a, d = randDigits(r, 3, 3), 2+r.IntN(8)
	}
	return Problem{
		Canonical: fmt.Sprintf("mul:%d*%d", a, d),
		Prompt:    fmt.Sprintf("What is %d*%d?", a, d),
		Reasoning: strings.Join(digitProduct(a, d), "\n"),
		Answer:    strconv.Itoa(a * d),
	}
}
