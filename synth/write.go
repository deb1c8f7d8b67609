package synth

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"dllm/eval"
)

// Files written by Write.
const (
	TrainFile   = "train.jsonl"
	DevFile     = "dev.jsonl"
	HeldoutFile = "heldout.jsonl"
	TextFile    = "text.jsonl"
	TasksFile   = "tasks.json"
)

// Message is one chat message in OpenAI's format.
type Message struct {
	Role             string `json:"role"`
	Content          string `json:"content"`
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// TrainRecord is one line of train.jsonl: a whole conversation, the
// assistant's work in reasoning_content and its answer in content (what
// `dllm data prepare` renders with the chat template).
type TrainRecord struct {
	ID       string    `json:"id"`
	Task     string    `json:"task"`
	Messages []Message `json:"messages"`
}

// TaskInfo is one task's entry in tasks.json.
type TaskInfo struct {
	Name         string  `json:"name"`
	Description  string  `json:"description"`
	Chance       float64 `json:"chance"`
	AnswerFormat string  `json:"answer_format"`
	Train        int     `json:"train"`
	Dev          int     `json:"dev"`
	Heldout      int     `json:"heldout"`
}

// TasksSummary is the content of tasks.json.
type TasksSummary struct {
	Seed  uint64     `json:"seed"`
	Size  string     `json:"size"`
	Text  int        `json:"text_documents"`
	Tasks []TaskInfo `json:"tasks"`
}

// Summary describes the set as tasks.json does.
func (s *Set) Summary() TasksSummary {
	sum := TasksSummary{Seed: s.Seed, Size: s.Size.Name, Text: len(s.Text)}
	for _, sp := range s.Tasks {
		sum.Tasks = append(sum.Tasks, TaskInfo{Name: sp.Task.Name, Description: sp.Task.Description, Chance: sp.Task.Chance,
			AnswerFormat: sp.Task.Format, Train: len(sp.Train), Dev: len(sp.Dev), Heldout: len(sp.Heldout)})
	}
	return sum
}

// TrainRecords returns the training conversations of every task, shuffled
// together (from the seed) so that a reader taking them in file order sees
// a mix.
func (s *Set) TrainRecords() []TrainRecord {
	var recs []TrainRecord
	for _, sp := range s.Tasks {
		for i, p := range sp.Train {
			recs = append(recs, TrainRecord{
				ID:   fmt.Sprintf("%s-train-%05d", sp.Task.Name, i),
				Task: sp.Task.Name,
				Messages: []Message{
					{Role: "user", Content: p.Prompt},
					{Role: "assistant", Content: p.Content(), ReasoningContent: p.Reasoning},
				},
			})
		}
	}
	r := rand.New(rand.NewPCG(s.Seed, 0x6d6978)) // "mix"
	r.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	return recs
}

// EvalRecords returns the held-out problems of every task, task by task,
// as the lines of heldout.jsonl: `dllm eval`'s items.
func (s *Set) EvalRecords() []eval.Item {
	return s.items(func(sp Split) []Problem { return sp.Heldout }, "")
}

// DevRecords are the dev problems as eval items, for dev.jsonl.
func (s *Set) DevRecords() []eval.Item {
	return s.items(func(sp Split) []Problem { return sp.Dev }, "dev-")
}

func (s *Set) items(split func(Split) []Problem, prefix string) []eval.Item {
	var recs []eval.Item
	for _, sp := range s.Tasks {
		format := ""
		if f := sp.Task.Format; f == FormatList || f == FormatProgram {
			format = f
		}
		for i, p := range split(sp) {
			recs = append(recs, eval.Item{
				ID:       fmt.Sprintf("%s%s-%05d", prefix, sp.Task.Name, i),
				Task:     sp.Task.Name,
				Messages: []eval.Message{{Role: "user", Content: p.Prompt}},
				Answer:   p.Answer,
				Choices:  p.Choices,
				Format:   format,
			})
		}
	}
	return recs
}

// textRecord is one line of text.jsonl.
type textRecord struct {
	Text string `json:"text"`
}

// Write writes train.jsonl, heldout.jsonl, tasks.json and, when they have
// anything, dev.jsonl and text.jsonl into dir (created if needed). Each
// file is written beside its name and renamed into place.
func (s *Set) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err := writeJSONL(filepath.Join(dir, TrainFile), s.TrainRecords()); err != nil {
		return err
	}
	if err := writeJSONL(filepath.Join(dir, HeldoutFile), s.EvalRecords()); err != nil {
		return err
	}
	if dev := s.DevRecords(); len(dev) > 0 {
		if err := writeJSONL(filepath.Join(dir, DevFile), dev); err != nil {
			return err
		}
	}
	if len(s.Text) > 0 {
		recs := make([]textRecord, len(s.Text))
		for i, t := range s.Text {
			recs[i] = textRecord{t}
		}
		if err := writeJSONL(filepath.Join(dir, TextFile), recs); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(s.Summary(), "", "  ")
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return writeAtomic(filepath.Join(dir, TasksFile), func(w *bufio.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

func writeJSONL[T any](path string, recs []T) error {
	return writeAtomic(path, func(w *bufio.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		for i := range recs {
			if err := enc.Encode(&recs[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeAtomic writes path through a temporary file and a rename, so an
// interrupted run never leaves a half-written file under the final name.
func writeAtomic(path string, fill func(*bufio.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	w := bufio.NewWriter(f)
	err = fill(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("synth: writing %s: %w", path, err)
	}
	return nil
}
