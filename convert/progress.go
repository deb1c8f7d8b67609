package convert

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// logEvery spaces progress lines when the log is not a terminal (a CI log
// or a file), where a redrawn bar would be hundreds of lines of noise.
const logEvery = 5 * time.Second

// progress counts the bytes a conversion moves (hashed, copied, written),
// which may come from several goroutines at once, against a total.
type progress struct {
	mu    sync.Mutex
	bar   *progressbar.ProgressBar // on a terminal
	w     io.Writer                // otherwise, for lines; nil: silent
	total int64
	done  int64
	last  time.Time
}

func newProgress(w io.Writer, terminal bool, total int64) *progress {
	p := &progress{w: w, total: total, last: time.Now()}
	if w != nil && terminal && total > 0 {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("convert"),
			progressbar.OptionShowBytes(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

func (p *progress) add(n int) {
	if p == nil || n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(n)
	switch {
	case p.bar != nil:
		p.bar.Add(n)
	case p.w != nil && time.Since(p.last) >= logEvery:
		p.last = time.Now()
		fmt.Fprintf(p.w, "convert: %s of %s (%.0f%%)\n", fmtBytes(p.done), fmtBytes(p.total), 100*float64(p.done)/float64(max(p.total, 1)))
	}
}

// finish removes the bar, so the summary that follows starts on a clean
// line.
func (p *progress) finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

// counting wraps w so that what is written to it counts as progress.
func (p *progress) counting(w io.Writer) io.Writer {
	return countingWriter{w, p}
}

type countingWriter struct {
	w io.Writer
	p *progress
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.add(n)
	return n, err
}
