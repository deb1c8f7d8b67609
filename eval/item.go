package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"dllm/openai"
)

// Message is one prompt message in OpenAI's chat format.
type Message = openai.Message

// Item is one question of an eval file.
type Item struct {
	// ID names the item in results; unique within a file.
	ID string `json:"id"`
	// Task groups items in the report.
	Task string `json:"task"`
	// Messages are sent as they are (system and user turns).
	Messages []Message `json:"messages"`
	// Answer is the exact expected answer: a number, a choice letter, or
	// any other string compared after trimming.
	Answer string `json:"answer"`
	// Choices, when present, make the item multiple choice: the answer is
	// a letter A, B, ... and chance is 1/len(choices) unless tasks.json
	// says otherwise.
	Choices []string `json:"choices,omitempty"`
	// Format, when set, says how the answer is read and scored: "list"
	// (integers separated by commas, compared in order), "program" (a
	// Python function in a fenced code block, run against the one in
	// Answer with RunFunction), "math" (the last \boxed{} of the reply,
	// compared with MathEqual) or "tests" (a Python program in the last
	// fenced block, run against Tests in the Sandbox; Answer is only
	// shown). Empty: a letter with Choices, else a number or text.
	Format string `json:"format,omitempty"`
	// Tests are what a "tests" item's program must pass.
	Tests *CodeTests `json:"tests,omitempty"`
	// Repeat numbers the samples of one question (Repeat): 0 for the first.
	Repeat int `json:"repeat,omitempty"`
}

// Repeat returns n samples of every item, for pass@1 averaged over n: with
// n > 1 the k-th sample's ID gets "#k" and its Repeat is k. sample, when
// not nil, makes each sample from the item and k (multiple-choice options in
// another order for each, say).
func Repeat(items []Item, n int, sample func(it Item, k int) Item) []Item {
	n = max(n, 1)
	out := items[:0:0]
	for _, it := range items {
		for k := range n {
			s := it
			if sample != nil {
				s = sample(it, k)
			}
			if n > 1 {
				s.ID, s.Repeat = fmt.Sprintf("%s#%d", it.ID, k), k
			}
			out = append(out, s)
		}
	}
	return out
}

// Item formats with their own scoring.
const (
	FormatList    = "list"
	FormatProgram = "program"
	FormatMath    = "math"
	FormatTests   = "tests"
)

// TaskInfo is what a tasks.json beside the eval file says about a task
// (the file `dllm data synth` writes); only the fields eval uses.
type TaskInfo struct {
	Name   string  `json:"name"`
	Chance float64 `json:"chance"`
}

// maxLine bounds one JSONL line of an eval file.
const maxLine = 16 << 20

// LoadItems reads an eval file, checking every item.
func LoadItems(path string) ([]Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var items []Item
	ids := map[string]int{}
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var it Item
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&it); err != nil {
			return nil, fmt.Errorf("eval: %s:%d: %w", path, line, err)
		}
		if err := it.check(); err != nil {
			return nil, fmt.Errorf("eval: %s:%d: %w", path, line, err)
		}
		if prev, dup := ids[it.ID]; dup {
			return nil, fmt.Errorf("eval: %s:%d: id %q already used on line %d", path, line, it.ID, prev)
		}
		ids[it.ID] = line
		items = append(items, it)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("eval: %s: %w", path, err)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("eval: %s holds no items", path)
	}
	return items, nil
}

func (it *Item) check() error {
	switch {
	case it.ID == "":
		return fmt.Errorf("item without an id")
	case it.Task == "":
		return fmt.Errorf("item %s: no task", it.ID)
	case len(it.Messages) == 0:
		return fmt.Errorf("item %s: no messages", it.ID)
	case it.Answer == "":
		return fmt.Errorf("item %s: no answer", it.ID)
	case len(it.Choices) > 26:
		return fmt.Errorf("item %s: %d choices (at most 26 letters)", it.ID, len(it.Choices))
	}
	for i, m := range it.Messages {
		if m.Role == "" {
			return fmt.Errorf("item %s: messages[%d] has no role", it.ID, i)
		}
	}
	switch it.Format {
	case "", FormatList, FormatMath:
	case FormatTests:
		if it.Tests == nil || len(it.Tests.Cases) == 0 {
			return fmt.Errorf("item %s: format %q without tests", it.ID, it.Format)
		}
	case FormatProgram:
		if _, err := RunFunction(it.Answer, 1); err != nil {
			return fmt.Errorf("item %s: the reference program does not run: %w", it.ID, err)
		}
	default:
		return fmt.Errorf("item %s: format %q: want %s, %s, %s, %s or none", it.ID, it.Format, FormatList, FormatProgram, FormatMath, FormatTests)
	}
	if len(it.Choices) > 0 {
		if l, ok := letterOf(it.Answer); !ok || int(l-'A') >= len(it.Choices) {
			return fmt.Errorf("item %s: answer %q is not a letter of its %d choices", it.ID, it.Answer, len(it.Choices))
		}
	}
	return nil
}

// LoadTaskInfo reads the tasks.json beside an eval file, if there is one;
// a missing file is no error (chance then comes from the items).
func LoadTaskInfo(evalPath string) (map[string]TaskInfo, error) {
	path := filepath.Join(filepath.Dir(evalPath), "tasks.json")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	var f struct {
		Tasks []TaskInfo `json:"tasks"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("eval: %s: %w", path, err)
	}
	m := map[string]TaskInfo{}
	for _, t := range f.Tasks {
		m[t.Name] = t
	}
	return m, nil
}
