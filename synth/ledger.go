package synth

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// ledgerGoods are what a ledger counts.
var ledgerGoods = []string{"apples", "pears", "eggs", "books", "lamps", "shirts", "cups", "chairs", "pens", "boxes"}

// genLedger asks how many goods a shop has after 3-30 days (by size) of
// sales and deliveries, told in prose a day per line; the stock stays in
// 0..999, so its width changes as it goes. The work restates each day and
// does its arithmetic, "Day 4: sold 12, so 47-12=35.", which makes the
// longest replies of the set: about 30 tokens a day, ~900 for 30 days.
func genLedger(r *rand.Rand, s Size) Problem {
	days := between(r, s.LedgerDays)
	goods := ledgerGoods[r.IntN(len(ledgerGoods))]
	stock := 10 + r.IntN(90)
	start := stock
	lines := []string{fmt.Sprintf("A shop has %d %s.", stock, goods)}
	work := make([]string, 0, days)
	var canon []string
	for d := 1; d <= days; d++ {
		// A sale never takes more than is there; a delivery never passes 999.
		sell := stock > 0 && (stock >= 900 || r.IntN(2) == 0)
		if sell {
			k := 1 + r.IntN(min(stock, 60))
			lines = append(lines, fmt.Sprintf("Day %d: it sells %d.", d, k))
			work = append(work, fmt.Sprintf("Day %d: sold %d, so %d-%d=%d.", d, k, stock, k, stock-k))
			canon = append(canon, "-"+strconv.Itoa(k))
			stock -= k
		} else {
			k := 1 + r.IntN(min(999-stock, 60))
			lines = append(lines, fmt.Sprintf("Day %d: it gets %d more.", d, k))
			work = append(work, fmt.Sprintf("Day %d: got %d, so %d+%d=%d.", d, k, stock, k, stock+k))
			canon = append(canon, "+"+strconv.Itoa(k))
			stock += k
		}
	}
	lines = append(lines, fmt.Sprintf("How many %s does it have after day %d?", goods, days))
	return Problem{
		Canonical: fmt.Sprintf("ledger:%d%s", start, strings.Join(canon, "")),
		Prompt:    strings.Join(lines, "\n"),
		Reasoning: strings.Join(work, "\n"),
		Answer:    strconv.Itoa(stock),
	}
}
