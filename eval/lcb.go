package eval

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// LiveCodeBench's code generation as lcb_runner asks it of a chat model
// (its OpenAI chat style): a system message, then the question with the
// starter code to complete or the stdin/stdout instructions.
const (
	lcbSystem  = "You are an expert Python programmer. You will be given a question (problem specification) and will generate a correct Python program that matches the specification and passes all tests."
	lcbStarter = "### Format: You will use the following starter code to write the solution to the problem and enclose your code within delimiters.\n```python\n%s\n```\n\n"
	lcbStdin   = "### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n"
	lcbAnswer  = "### Answer: (use the provided format with backticks)\n\n"
)

// LCBv6 is LiveCodeBench v6's window of contest dates, the problems of its
// sixth release (test6.jsonl): February to April 2025.
var LCBv6 = Window{From: time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)}

// Window is a range of contest dates: From inclusive, To exclusive.
type Window struct{ From, To time.Time }

// ParseWindow reads "2025-02-01:2025-05-01" (the end exclusive).
func ParseWindow(s string) (Window, error) {
	a, b, ok := strings.Cut(s, ":")
	from, err1 := time.Parse(time.DateOnly, strings.TrimSpace(a))
	to, err2 := time.Parse(time.DateOnly, strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || !from.Before(to) {
		return Window{}, fmt.Errorf("window %q: want FROM:TO, two dates YYYY-MM-DD with FROM before TO (TO excluded)", s)
	}
	return Window{from, to}, nil
}

// String is "2025-02-01:2025-05-01".
func (w Window) String() string {
	return w.From.Format(time.DateOnly) + ":" + w.To.Format(time.DateOnly)
}

// lcbRow is one problem of livecodebench/code_generation_lite, every field
// a string as the dataset stores it.
type lcbRow struct {
	QuestionTitle    string `json:"question_title"`
	QuestionContent  string `json:"question_content"`
	Platform         string `json:"platform"`
	QuestionID       string `json:"question_id"`
	ContestDate      string `json:"contest_date"`
	StarterCode      string `json:"starter_code"`
	PublicTestCases  string `json:"public_test_cases"`
	PrivateTestCases string `json:"private_test_cases"`
	Metadata         string `json:"metadata"`
}

// lcbColumns are the row's fields, for reading Parquet files.
var lcbColumns = []string{"question_title", "question_content", "platform", "question_id", "contest_date", "starter_code", "public_test_cases", "private_test_cases", "metadata"}

// loadLCB reads the problems of every test*.jsonl and *.parquet file in dir
// (livecodebench/code_generation_lite as downloaded) whose contest date
// falls in the window, sorted by question_id as lcb_runner sorts them.
// Tests are decoded only for the problems kept: public first, then
// private, as lcb_runner grades them.
func loadLCB(dir string, o SuiteOptions) ([]Item, error) {
	var paths []string
	for _, pat := range []string{"*.jsonl", "*.parquet"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		paths = append(paths, m...)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no .jsonl or .parquet files in %s: %w", dir, fs.ErrNotExist)
	}
	slices.Sort(paths)
	w := o.LCBWindow
	if w.From.IsZero() {
		w = LCBv6
	}
	seen := map[string]bool{}
	var items []Item
	for _, path := range paths {
		read := readLCBJSONL
		if strings.HasSuffix(path, ".parquet") {
			read = readLCBParquet
		}
		err := read(path, func(where string, row *lcbRow) error {
			d, err := contestDate(row.ContestDate)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if d.Before(w.From) || !d.Before(w.To) || seen[row.QuestionID] {
				return nil
			}
			seen[row.QuestionID] = true
			it, err := lcbItem(row)
			if err != nil {
				return fmt.Errorf("%s: question %s: %w", where, row.QuestionID, err)
			}
			items = append(items, it)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("no problem of %s has a contest date in %s (--lcb-window)", dir, w)
	}
	slices.SortFunc(items, func(a, b Item) int { return strings.Compare(a.ID, b.ID) })
	return Repeat(items, o.Samples, nil), nil
}

func readLCBJSONL(path string, add func(where string, row *lcbRow) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for line := 1; ; line++ {
		// Lines hold whole test suites (megabytes), beyond bufio.Scanner's
		// comfort: read each in full.
		b, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			var row lcbRow
			if jerr := json.Unmarshal(b, &row); jerr != nil {
				return fmt.Errorf("%s:%d: %w", path, line, jerr)
			}
			if aerr := add(fmt.Sprintf("%s:%d", path, line), &row); aerr != nil {
				return aerr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func readLCBParquet(path string, add func(where string, row *lcbRow) error) error {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer tbl.Release()
	idx := make([]int, len(lcbColumns))
	for i, name := range lcbColumns {
		f := tbl.Schema().FieldIndices(name)
		if len(f) == 0 {
			return fmt.Errorf("%s: no %q column (is this livecodebench/code_generation_lite?)", path, name)
		}
		idx[i] = f[0]
	}
	tr := array.NewTableReader(tbl, 64)
	defer tr.Release()
	n := 0
	for tr.Next() {
		rec := tr.RecordBatch()
		cols := make([]stringValues, len(idx))
		for i, c := range idx {
			var ok bool
			if cols[i], ok = rec.Column(c).(stringValues); !ok {
				return fmt.Errorf("%s: column %q is not strings", path, lcbColumns[i])
			}
		}
		for r := 0; r < int(rec.NumRows()); r++ {
			n++
			row := lcbRow{cols[0].Value(r), cols[1].Value(r), cols[2].Value(r), cols[3].Value(r), cols[4].Value(r), cols[5].Value(r), cols[6].Value(r), cols[7].Value(r), cols[8].Value(r)}
			if err := add(fmt.Sprintf("%s: row %d", path, n), &row); err != nil {
				return err
			}
		}
	}
	return tr.Err()
}

// contestDate reads an ISO date-time ("2025-03-01T18:30:00", with or
// without fractions or a zone) or a date.
func contestDate(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", time.DateOnly} {
		if t, err := time.Parse(layout, strings.TrimSpace(s)); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("contest_date %q is not an ISO date", s)
}

// lcbItem turns a row into an item: its prompt and its tests.
func lcbItem(row *lcbRow) (Item, error) {
	if row.QuestionID == "" || row.QuestionContent == "" {
		return Item{}, errors.New("no question_id or question_content")
	}
	var tests CodeTests
	if row.Metadata != "" {
		var meta struct {
			FuncName string `json:"func_name"`
		}
		if err := json.Unmarshal([]byte(row.Metadata), &meta); err != nil {
			return Item{}, fmt.Errorf("metadata: %w", err)
		}
		tests.FuncName = meta.FuncName
	}
	for _, part := range []struct{ name, s string }{{"public_test_cases", row.PublicTestCases}, {"private_test_cases", row.PrivateTestCases}} {
		cases, err := decodeLCBTests(part.s)
		if err != nil {
			return Item{}, fmt.Errorf("%s: %w", part.name, err)
		}
		tests.Cases = append(tests.Cases, cases...)
	}
	if len(tests.Cases) == 0 {
		return Item{}, errors.New("no test cases")
	}
	user := "### Question:\n" + row.QuestionContent + "\n\n"
	if row.StarterCode != "" {
		user += fmt.Sprintf(lcbStarter, row.StarterCode)
	} else {
		user += lcbStdin
	}
	user += lcbAnswer
	return Item{
		ID: row.QuestionID, Task: "livecodebench_v6", Format: FormatTests, Tests: &tests,
		Answer:   fmt.Sprintf("passes its %d tests", len(tests.Cases)),
		Messages: []Message{{Role: "system", Content: lcbSystem}, {Role: "user", Content: user}},
	}, nil
}

// decodeLCBTests reads a test-case list: JSON, or (private tests) the
// JSON string pickled, zlib-compressed and base64-encoded.
func decodeLCBTests(s string) ([]TestCase, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var cases []TestCase
	if err := json.Unmarshal([]byte(s), &cases); err == nil {
		return cases, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("neither JSON nor base64")
	}
	zr, err := zlib.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("zlib: %w", err)
	}
	pickled, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("zlib: %w", err)
	}
	js, err := unpickleString(pickled)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(js), &cases); err != nil {
		return nil, fmt.Errorf("the unpickled string: %w", err)
	}
	return cases, nil
}

// unpickleString reads a pickle (protocols 2-5) of one Python str: the
// opcodes such a pickle holds (PROTO, FRAME, the BINUNICODE forms, the
// memo, STOP) and no others, so nothing in the file can run.
func unpickleString(b []byte) (string, error) {
	var s string
	got := false
	bad := errors.New("pickle: truncated")
	for i := 0; i < len(b); {
		op := b[i]
		i++
		need := func(n int) ([]byte, error) {
			if n < 0 || i+n > len(b) {
				return nil, bad
			}
			v := b[i : i+n]
			i += n
			return v, nil
		}
		var err error
		var v []byte
		switch op {
		case 0x80: // PROTO
			_, err = need(1)
		case 0x95: // FRAME
			_, err = need(8)
		case 0x94: // MEMOIZE
		case 'q': // BINPUT
			_, err = need(1)
		case 'r': // LONG_BINPUT
			_, err = need(4)
		case 0x8c: // SHORT_BINUNICODE
			if v, err = need(1); err == nil {
				v, err = need(int(v[0]))
			}
		case 'X': // BINUNICODE
			if v, err = need(4); err == nil {
				v, err = need(int(binary.LittleEndian.Uint32(v)))
			}
		case 0x8d: // BINUNICODE8
			if v, err = need(8); err == nil {
				n := binary.LittleEndian.Uint64(v)
				if n > uint64(len(b)) {
					return "", bad
				}
				v, err = need(int(n))
			}
		case '.': // STOP
			if !got {
				return "", errors.New("pickle: no string")
			}
			return s, nil
		default:
			return "", fmt.Errorf("pickle: opcode %#x is not part of a pickled string", op)
		}
		if err != nil {
			return "", err
		}
		if op == 0x8c || op == 'X' || op == 0x8d {
			if got {
				return "", errors.New("pickle: more than one string")
			}
			s, got = string(v), true
		}
	}
	return "", errors.New("pickle: no STOP")
}

// extractLCBCode is lcb_runner's extraction: the lines between the last
// two lines that contain ``` (normally the last fenced block); no code
// when there are fewer than two.
func extractLCBCode(content string) (string, bool) {
	lines := strings.Split(content, "\n")
	var fences []int
	for i, l := range lines {
		if strings.Contains(l, "```") {
			fences = append(fences, i)
		}
	}
	if len(fences) < 2 {
		return "", false
	}
	code := strings.Join(lines[fences[len(fences)-2]+1:fences[len(fences)-1]], "\n")
	return code, strings.TrimSpace(code) != ""
}
