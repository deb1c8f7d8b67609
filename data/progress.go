package data

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// logEvery spaces progress lines when the log is not a terminal (CI, a
// file), where a redrawn bar would be noise.
const logEvery = 10 * time.Second

// progress reports tokens written, overall and per source, with rates:
// a redrawn bar on a terminal, plain lines elsewhere.
type progress struct {
	w        io.Writer
	bar      *progressbar.ProgressBar
	names    []string
	start    time.Time
	last     time.Time
	every    time.Duration
	base     int64 // tokens already written by an earlier run
	baseSrc  []int64
	written  int64
	shards   int
	perSrc   []int64
	finished bool
}

func newProgress(w io.Writer, terminal bool, total int64, names []string, base int64, baseSrc []int64) *progress {
	p := &progress{w: w, names: names, start: time.Now(), base: base, baseSrc: baseSrc, every: logEvery}
	if w == nil {
		return p
	}
	if terminal {
		max := int64(-1) // unknown: a spinner with counts and rate
		if total > 0 {
			max = total
		}
		p.bar = progressbar.NewOptions64(max,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("tokens"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("tok"),
			progressbar.OptionSetWidth(25),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionClearOnFinish(),
		)
		p.bar.Set64(base)
		p.every = 500 * time.Millisecond
	}
	p.last = p.start
	return p
}

// update records the totals after a sequence or shard.
func (p *progress) update(written int64, perSrc []int64, shards int) {
	p.written, p.perSrc, p.shards = written, perSrc, shards
	if p.w == nil {
		return
	}
	if p.bar != nil {
		p.bar.Set64(written)
	}
	if now := time.Now(); now.Sub(p.last) >= p.every {
		p.last = now
		p.report(false)
	}
}

// report writes a line, or refreshes the bar's per-source description.
func (p *progress) report(final bool) {
	el := time.Since(p.start).Seconds()
	var parts []string
	for i, n := range p.perSrc {
		parts = append(parts, fmt.Sprintf("%s %s (%s/s)", p.names[i], count(n), count(int64(float64(n-p.baseSrc[i])/max(el, 1e-9)))))
	}
	rate := float64(p.written-p.base) / max(el, 1e-9)
	if p.bar != nil && !final {
		p.bar.Describe(fmt.Sprintf("shards %d | %s", p.shards, strings.Join(parts, " | ")))
		return
	}
	fmt.Fprintf(p.w, "data: %s tokens written (%s tok/s), %d shards | taken: %s\n", count(p.written), count(int64(rate)), p.shards, strings.Join(parts, ", "))
}

func (p *progress) finish() {
	if p.w == nil || p.finished {
		return
	}
	p.finished = true
	if p.bar != nil {
		p.bar.Exit()
		p.bar.Clear()
		fmt.Fprintln(p.w)
	}
	p.report(true)
}

// count prints n with a metric suffix.
func count(n int64) string {
	f := float64(n)
	switch {
	case f >= 1e9:
		return fmt.Sprintf("%.2fB", f/1e9)
	case f >= 1e6:
		return fmt.Sprintf("%.2fM", f/1e6)
	case f >= 1e4:
		return fmt.Sprintf("%.1fk", f/1e3)
	}
	return fmt.Sprint(n)
}
