package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
)

// journal appends each finished item to a JSONL file as it comes, so that
// a run that stops (a crash, ^C, a server lost) resumes where it was: a
// benchmark run takes hours. Its first line is the run's settings; a rerun
// with other settings is refused rather than mixing two runs' answers.
type journal struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	err error
}

// journalHead is the journal's first line.
type journalHead struct {
	Settings json.RawMessage `json:"settings"`
}

// openJournal opens (creating it if needed) the journal at path for a run
// with settings, and returns the results it already holds for items,
// by item ID. Results that failed with an error are not kept: they are
// asked again.
func openJournal(path string, settings map[string]any, items []Item) (*journal, map[string]ItemResult, error) {
	want, err := json.Marshal(settings)
	if err != nil {
		return nil, nil, fmt.Errorf("eval: journal settings: %w", err)
	}
	done := map[string]ItemResult{}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		b = nil
	case err != nil:
		return nil, nil, fmt.Errorf("eval: %w", err)
	}
	if len(b) > 0 {
		lines := bytes.Split(b, []byte("\n"))
		var head journalHead
		if err := json.Unmarshal(lines[0], &head); err != nil || !bytes.Equal(head.Settings, want) {
			return nil, nil, fmt.Errorf("eval: %s holds a run with other settings (%s); delete it to start over, or rerun with those settings to resume it", path, head.Settings)
		}
		ids := map[string]bool{}
		for _, it := range items {
			ids[it.ID] = true
		}
		for _, l := range lines[1:] {
			var r ItemResult
			// A last line cut by a crash is simply asked again.
			if json.Unmarshal(l, &r) == nil && ids[r.ID] && r.Error == "" {
				done[r.ID] = r
			}
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("eval: %w", err)
	}
	j := &journal{f: f, w: bufio.NewWriter(f)}
	if len(b) == 0 {
		j.write(journalHead{Settings: want})
	} else if b[len(b)-1] != '\n' {
		j.w.WriteByte('\n') // after a cut last line
	}
	return j, done, j.flush()
}

// add appends a finished item (failed requests are left to the rerun).
func (j *journal) add(r ItemResult) error {
	if r.Error != "" {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.write(r)
	return j.flush()
}

func (j *journal) write(v any) {
	b, err := json.Marshal(v)
	if err == nil {
		j.w.Write(append(b, '\n'))
	}
	j.err = errors.Join(j.err, err)
}

// flush writes what is buffered to the file, so a crash loses nothing
// finished.
func (j *journal) flush() error {
	if err := j.w.Flush(); err != nil {
		j.err = errors.Join(j.err, err)
	}
	return j.err
}

func (j *journal) close() error {
	err := j.flush()
	return errors.Join(err, j.f.Close())
}
