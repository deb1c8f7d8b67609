package synth

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// wordPeople are the word problems' people, with their pronouns.
var wordPeople = []struct{ name, pron string }{
	{"Ava", "She"}, {"Ben", "He"}, {"Mia", "She"}, {"Leo", "He"}, {"Zoe", "She"}, {"Sam", "He"},
	{"Ivy", "She"}, {"Max", "He"}, {"Eva", "She"}, {"Tom", "He"}, {"Lily", "She"}, {"Noah", "He"},
}

// wordItems are the things counted.
var wordItems = []string{"apples", "marbles", "stickers", "coins", "pencils", "cards", "shells", "books", "stamps", "beads"}

// genWord writes a word problem in prose: someone's count of something
// through 1-3 events (by size: buying bags of a number each, giving some
// away, finding more, and last perhaps sharing equally), or two people's
// counts compared. The work says each step in words and does its
// arithmetic: "3 bags of 12 is 3*12=36.", "23+36=59.".
func genWord(r *rand.Rand, s Size) Problem {
	a := wordPeople[r.IntN(len(wordPeople))]
	b := wordPeople[r.IntN(len(wordPeople))]
	for b.name == a.name {
		b = wordPeople[r.IntN(len(wordPeople))]
	}
	item := wordItems[r.IntN(len(wordItems))]
	if r.IntN(5) == 0 {
		x, y := 10+r.IntN(490), 1+r.IntN(400)
		for y >= x {
			y = 1 + r.IntN(400)
		}
		return Problem{
			Canonical: fmt.Sprintf("word:cmp:%d:%d:%s", x, y, item),
			Prompt:    fmt.Sprintf("%s has %d %s and %s has %d %s. How many more %s does %s have than %s?", a.name, x, item, b.name, y, item, item, a.name, b.name),
			Reasoning: fmt.Sprintf("%s has %d and %s has %d.\n%d-%d=%d.", a.name, x, b.name, y, x, y, x-y),
			Answer:    strconv.Itoa(x - y),
		}
	}
	cur := 5 + r.IntN(95)
	text := []string{fmt.Sprintf("%s has %d %s.", a.name, cur, item)}
	work := []string{fmt.Sprintf("%s starts with %d.", a.name, cur)}
	canon := []string{strconv.Itoa(cur)}
	question := fmt.Sprintf("How many %s does %s have now?", item, a.name)
	steps := between(r, s.WordSteps)
	for i := range steps {
		switch k := r.IntN(4); {
		case k == 0 && cur < 500:
			n, m := 2+r.IntN(8), 2+r.IntN(24)
			text = append(text, fmt.Sprintf("%s buys %d bags with %d %s in each bag.", a.pron, n, m, item))
			work = append(work, fmt.Sprintf("%d bags of %d is %d*%d=%d.", n, m, n, m, n*m), fmt.Sprintf("%d+%d=%d.", cur, n*m, cur+n*m))
			canon = append(canon, fmt.Sprintf("+%dx%d", n, m))
			cur += n * m
		case k == 1 && cur > 1:
			n := 1 + r.IntN(cur-1)
			text = append(text, fmt.Sprintf("%s gives %d %s to %s.", a.pron, n, item, b.name))
			work = append(work, fmt.Sprintf("%s gives away %d: %d-%d=%d.", a.name, n, cur, n, cur-n))
			canon = append(canon, fmt.Sprintf("-%d", n))
			cur -= n
		case k == 2 && i == steps-1 && cur >= 4:
			// Sharing ends the story: the question is each friend's part.
			var divs []int
			for d := 2; d <= 9; d++ {
				if cur%d == 0 {
					divs = append(divs, d)
				}
			}
			if len(divs) == 0 {
				n := 1 + r.IntN(30)
				text = append(text, fmt.Sprintf("%s finds %d more.", a.pron, n))
				work = append(work, fmt.Sprintf("%s finds %d: %d+%d=%d.", a.name, n, cur, n, cur+n))
				canon = append(canon, fmt.Sprintf("+%d", n))
				cur += n
				continue
			}
			d := divs[r.IntN(len(divs))]
			text = append(text, fmt.Sprintf("%s shares them equally among %d friends.", a.pron, d))
			question = fmt.Sprintf("How many %s does each friend get?", item)
			work = append(work, fmt.Sprintf("%d shared by %d is %d/%d=%d.", cur, d, cur, d, cur/d))
			canon = append(canon, fmt.Sprintf("/%d", d))
			cur /= d
		default:
			n := 1 + r.IntN(30)
			text = append(text, fmt.Sprintf("%s finds %d more.", a.pron, n))
			work = append(work, fmt.Sprintf("%s finds %d: %d+%d=%d.", a.name, n, cur, n, cur+n))
			canon = append(canon, fmt.Sprintf("+%d", n))
			cur += n
		}
	}
	text = append(text, question)
	return Problem{
		Canonical: "word:" + item + ":" + strings.Join(canon, ""),
		Prompt:    strings.Join(text, " "),
		Reasoning: strings.Join(work, "\n"),
		Answer:    strconv.Itoa(cur),
	}
}
