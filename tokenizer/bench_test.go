package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

var proseWords = strings.Fields(`the of and to in a is that for it as was with be by on not he this are or
his from at which but have an they you were her she there been one all we their has would when if so no
will more can its time only new some could these two may first then do any like my now over such our man
me even most made after also did many before must through back years where much your way well down should
because each just those people how too little state good very make world still own see men work long get
here between both life being under never day same another know while last might us great old year off
come since against go came right used take three however model language token diffusion training data
system network results method performance approach analysis value function example number problem`)

var codeLines = []string{
	"func (s *%s) Handle(ctx context.Context, req *Request) (*Response, error) {",
	"\tif err := %s.Validate(); err != nil {\n\t\treturn nil, fmt.Errorf(\"validate: %%w\", err)\n\t}",
	"def %s(self, x: int, y: float = 0.5) -> list[int]:\n    return [i * 2 for i in range(x)]",
	"    for (int i = 0; i < %s.size(); ++i) { total += values[i]; }",
	"const %s = require('./lib'); // TODO: remove after v2.3.1",
	"SELECT id, name FROM %s WHERE created_at > '2024-01-01' ORDER BY id DESC;",
}

var emoji = []string{"🤖", "🚀", "😀", "👍", "🎉", "❤️", "👩‍💻", "🔥", "✅", "🌍"}

// mixedText deterministically generates about n bytes of English prose,
// code with fresh identifiers, numbers, CJK and emoji. Fresh identifiers
// and random CJK runs keep a realistic share of words missing the cache.
func mixedText(n int) string {
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	ident := func() string {
		var id strings.Builder
		for range 3 + r.IntN(10) {
			id.WriteByte(byte('a' + r.IntN(26)))
		}
		return id.String()
	}
	for b.Len() < n {
		switch k := r.IntN(20); {
		case k < 12: // a sentence of prose
			for i := range 8 + r.IntN(15) {
				w := proseWords[r.IntN(len(proseWords))]
				if r.IntN(20) == 0 {
					w = ident()
				}
				if i == 0 {
					w = strings.ToUpper(w[:1]) + w[1:]
				} else {
					b.WriteByte(' ')
				}
				b.WriteString(w)
				if r.IntN(8) == 0 {
					b.WriteString(",")
				}
			}
			b.WriteString(". ")
			if r.IntN(5) == 0 {
				b.WriteString("\n\n")
			}
		case k < 15:
			fmt.Fprintf(&b, codeLines[r.IntN(len(codeLines))]+"\n", ident())
		case k < 17:
			fmt.Fprintf(&b, "%d items cost $%.2f (%d%%) on %04d-%02d-%02d. ", r.IntN(100000), r.Float64()*1000, r.IntN(100), 1990+r.IntN(40), 1+r.IntN(12), 1+r.IntN(28))
		case k < 19:
			for range 5 + r.IntN(30) {
				b.WriteRune(rune(0x4E00 + r.IntN(3000)))
			}
			b.WriteString("。")
		default:
			b.WriteString(emoji[r.IntN(len(emoji))] + " ")
		}
	}
	return b.String()
}

// BenchmarkEncode measures single-goroutine encode throughput of Qwen3's
// tokenizer on 10 MB of mixed text.
func BenchmarkEncode(b *testing.B) {
	tok := qwen(b)
	text := mixedText(10 << 20)
	b.SetBytes(int64(len(text)))
	var ids []int
	for b.Loop() {
		ids = tok.AppendEncode(ids[:0], text)
	}
	b.ReportMetric(float64(len(text))/float64(len(ids)), "bytes/token")
}
