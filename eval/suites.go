package eval

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Suite is a published benchmark read from its official files, with the
// prompt and scoring of the reference harnesses (docs/eval.md).
type Suite struct {
	// Name is the --suite name; Task names its items in reports.
	Name, Task string
	// File is the official file's path under --data, as the download
	// commands of docs/eval.md leave it.
	File string
	// Zero and Full are the accuracies normalised to 0 and 100: chance,
	// and the AR MiniCPM5-2B's published score.
	Zero, Full float64
	// load reads the file (a directory for lcb-v6) into o.Samples copies
	// of every item (see Repeat).
	load func(path string, o SuiteOptions) ([]Item, error)
}

// SuiteOptions say how LoadSuites reads the suites.
type SuiteOptions struct {
	// Samples is the number of samples of every question, for pass@1
	// averaged over them (at least 1).
	Samples int
	// LCBWindow keeps lcb-v6's problems of these contest dates (zero:
	// LCBv6).
	LCBWindow Window
}

// mathPrompt is Qwen2.5-Math's chain-of-thought instruction, which MATH-500
// evaluations of reasoning models use.
const mathPrompt = "Please reason step by step, and put your final answer within \\boxed{}."

// mcqPrompt is simple-evals' multiple-choice template (GPQA, MMLU-Pro):
// the question, the options as "A) ...", the answer on a last "Answer: X"
// line.
const mcqPrompt = "Answer the following multiple choice question. The last line of your response should be of the following format: 'Answer: $LETTER' (without quotes) where LETTER is one of %s. Think step by step before answering.\n\n%s\n\n%s"

// Suites are the benchmarks dllm eval reads, by --suite name.
var Suites = map[string]Suite{
	"math-500":     {Name: "math-500", Task: "math_500", File: "math-500/test.jsonl", Zero: 0, Full: 0.98, load: loadMATH500},
	"gpqa-diamond": {Name: "gpqa-diamond", Task: "gpqa_diamond", File: "gpqa/gpqa_diamond.csv", Zero: 0.25, Full: 0.6717, load: loadGPQA},
	"mmlu-pro":     {Name: "mmlu-pro", Task: "mmlu_pro", File: "mmlu-pro/data/test-00000-of-00001.parquet", Zero: 0.1111, Full: 0.6914, load: loadMMLUPro},
	"lcb-v6":       {Name: "lcb-v6", Task: "livecodebench_v6", File: "livecodebench", Zero: 0, Full: 0.6483, load: loadLCB},
}

// LoadSuites reads the named suites' files under dir, each item repeated
// o.Samples times (pass@1 averaged over the samples): their items, each
// task's chance, and a baseline report holding the AR original's scores
// (Report.CompareTo normalises against it).
func LoadSuites(names []string, dir string, o SuiteOptions) (items []Item, chance map[string]float64, base *Report, err error) {
	o.Samples = max(o.Samples, 1)
	chance = map[string]float64{}
	base = &Report{}
	for _, name := range names {
		s, ok := Suites[name]
		if !ok {
			return nil, nil, nil, fmt.Errorf("eval: unknown suite %q (want one of %s)", name, suiteNames())
		}
		path := filepath.Join(dir, s.File)
		got, err := s.load(path, o)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, nil, fmt.Errorf("eval: suite %s: no %s (docs/eval.md says how to download it)", name, path)
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("eval: suite %s: %s: %w", name, path, err)
		}
		if len(got) == 0 {
			return nil, nil, nil, fmt.Errorf("eval: suite %s: %s has no items", name, path)
		}
		items = append(items, got...)
		chance[s.Task] = s.Zero
		base.Tasks = append(base.Tasks, TaskSummary{Task: s.Task, Accuracy: s.Full, Chance: s.Zero})
	}
	return items, chance, base, nil
}

func suiteNames() string {
	names := make([]string, 0, len(Suites))
	for n := range Suites {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// loadMATH500 reads HuggingFaceH4/MATH-500's test.jsonl: one JSON object a
// line with problem, answer and unique_id (and solution, subject, level,
// which scoring does not use).
func loadMATH500(path string, o SuiteOptions) ([]Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var items []Item
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var row struct {
			Problem  string `json:"problem"`
			Answer   string `json:"answer"`
			UniqueID string `json:"unique_id"`
		}
		if err := json.Unmarshal(b, &row); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if row.Problem == "" || row.Answer == "" {
			return nil, fmt.Errorf("line %d: no problem or answer (is this MATH-500's test.jsonl?)", line)
		}
		id := row.UniqueID
		if id == "" {
			id = fmt.Sprintf("math_500-%d", line)
		}
		items = append(items, Item{ID: id, Task: "math_500", Format: FormatMath, Answer: row.Answer,
			Messages: []Message{{Role: "user", Content: row.Problem + "\n" + mathPrompt}}})
	}
	return Repeat(items, o.Samples, nil), sc.Err()
}

// loadGPQA reads Idavidrein/gpqa's gpqa_diamond.csv: a header row, then
// per question its Question, Correct Answer and Incorrect Answer 1-3
// (among many other columns). The four options are shuffled by a seed
// drawn from the question's Record ID (else its row) and the sample's
// number, so every run and every server sees the same orders.
func loadGPQA(path string, o SuiteOptions) ([]Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	need := []string{"Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"}
	for _, n := range need {
		if _, ok := col[n]; !ok {
			return nil, fmt.Errorf("no %q column (is this GPQA's gpqa_diamond.csv?)", n)
		}
	}
	var items []Item
	for row := 2; ; row++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		field := func(n string) string {
			if i := col[n]; i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		opts := []string{field("Correct Answer"), field("Incorrect Answer 1"), field("Incorrect Answer 2"), field("Incorrect Answer 3")}
		q := field("Question")
		if q == "" || slices.Contains(opts, "") {
			return nil, fmt.Errorf("row %d: a question or an option is empty", row)
		}
		id := field("Record ID")
		if id == "" {
			id = fmt.Sprintf("gpqa_diamond-%d", row)
		}
		it := Item{ID: id, Task: "gpqa_diamond"}
		items = append(items, Repeat([]Item{it}, o.Samples, func(it Item, k int) Item {
			key := id
			if k > 0 {
				key = fmt.Sprintf("%s#%d", id, k)
			}
			order := shuffled(len(opts), key)
			it.Choices = make([]string, len(opts))
			for pos, o := range order {
				it.Choices[pos] = opts[o]
				if o == 0 {
					it.Answer = string(rune('A' + pos))
				}
			}
			it.Messages = []Message{{Role: "user", Content: mcq(q, it.Choices)}}
			return it
		})...)
	}
	return items, nil
}

// loadMMLUPro reads TIGER-Lab/MMLU-Pro's test Parquet file: per question
// its question_id, question, options (a list of up to ten) and answer (a
// letter). Options "N/A", which pad some lists, are dropped as MMLU-Pro's
// own evaluate_from_local.py drops them.
func loadMMLUPro(path string, o SuiteOptions) ([]Item, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		return nil, err
	}
	defer tbl.Release()
	cols := map[string]int{}
	for _, name := range []string{"question_id", "question", "options", "answer"} {
		idx := tbl.Schema().FieldIndices(name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("no %q column (is this MMLU-Pro's test Parquet file?)", name)
		}
		cols[name] = idx[0]
	}
	tr := array.NewTableReader(tbl, 1024)
	defer tr.Release()
	var items []Item
	for tr.Next() {
		rec := tr.RecordBatch()
		got, err := mmluRows(rec, cols)
		if err != nil {
			return nil, err
		}
		items = append(items, got...)
	}
	return Repeat(items, o.Samples, nil), tr.Err()
}

// stringValues is a String or LargeString column.
type stringValues interface{ Value(int) string }

// listValues is a List or LargeList column.
type listValues interface {
	ValueOffsets(int) (int64, int64)
	ListValues() arrow.Array
}

// mmluRows turns one record batch of MMLU-Pro into items.
func mmluRows(rec arrow.RecordBatch, cols map[string]int) ([]Item, error) {
	q, ok1 := rec.Column(cols["question"]).(stringValues)
	ans, ok2 := rec.Column(cols["answer"]).(stringValues)
	opts, ok3 := rec.Column(cols["options"]).(listValues)
	var texts stringValues
	if ok3 {
		texts, ok3 = opts.ListValues().(stringValues)
	}
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("question, answer and options must be strings and a list of strings")
	}
	ids := rec.Column(cols["question_id"])
	var items []Item
	for i := 0; i < int(rec.NumRows()); i++ {
		id := "mmlu_pro-" + ids.ValueStr(i)
		lo, hi := opts.ValueOffsets(i)
		var choices []string
		for j := lo; j < hi; j++ {
			if o := strings.TrimSpace(texts.Value(int(j))); o != "N/A" {
				choices = append(choices, o)
			}
		}
		a := strings.TrimSpace(ans.Value(i))
		if len(a) != 1 || a[0] < 'A' || int(a[0]-'A') >= len(choices) {
			return nil, fmt.Errorf("%s: answer %q is not a letter of its %d options", id, a, len(choices))
		}
		items = append(items, Item{ID: id, Task: "mmlu_pro", Answer: a, Choices: choices,
			Messages: []Message{{Role: "user", Content: mcq(q.Value(i), choices)}}})
	}
	return items, nil
}

// mcq renders a multiple-choice question with simple-evals' template.
func mcq(question string, choices []string) string {
	letters := make([]string, len(choices))
	lines := make([]string, len(choices))
	for i, c := range choices {
		letters[i] = string(rune('A' + i))
		lines[i] = letters[i] + ") " + c
	}
	return fmt.Sprintf(mcqPrompt, strings.Join(letters, ""), question, strings.Join(lines, "\n"))
}

// shuffled is a permutation of 0..n-1 seeded by key: the same key gives
// the same order on every machine.
func shuffled(n int, key string) []int {
	h := sha256.Sum256([]byte("dllm-eval-options\x00" + key))
	rng := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(h[:8]), binary.LittleEndian.Uint64(h[8:16])))
	return rng.Perm(n)
}
