package data

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/apache/arrow-go/v18/parquet/file"
)

// The guard's second look: the scored benchmarks' official files by their
// shape, whatever they are named, so that a renamed or re-bundled copy
// (gpqa_diamond.csv saved as questions.csv) is still refused. A file's
// fingerprint is its columns or first record's keys: cheap to read (the
// first line, a CSV header, a Parquet schema) and specific to the
// benchmark's published format.
var evalFingerprints = []struct {
	name string
	keys []string // all present: the first JSON record's keys, the CSV header or the Parquet columns
}{
	{"GPQA", []string{"Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"}},
	// "unique_id=test/": the first record's unique_id names MATH's test
	// split (MATH-500's are "test/algebra/1.json" and so on), so a train
	// split published in the same layout is not refused.
	{"MATH-500", []string{"problem", "solution", "answer", "subject", "level", "unique_id=test/"}},
	{"MMLU-Pro", []string{"question_id", "question", "options", "answer", "answer_index", "cot_content", "category", "src"}},
	{"LiveCodeBench", []string{"question_title", "question_content", "platform", "contest_date", "public_test_cases", "private_test_cases"}},
}

// evalContentReason says why the file at path has the shape of a scored
// benchmark's official file, or "" when it does not (or cannot be read:
// the reader reports that with more context).
func evalContentReason(path string) string {
	keys := fileKeys(path)
	for _, fp := range evalFingerprints {
		if hasAll(keys, fp.keys) {
			return fmt.Sprintf("its columns (%s) are those of the benchmark %s's official file, which the model is evaluated on", strings.Join(fp.keys, ", "), fp.name)
		}
	}
	return ""
}

// fileKeys is the set of column names of a Parquet file or a CSV file's
// header, or the keys of a JSON Lines file's first record.
func fileKeys(path string) map[string]bool {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	head := make([]byte, 4)
	if n, _ := f.Read(head); n == 4 && string(head) == "PAR1" {
		return parquetColumns(path)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return nil
	}
	line, err := bufio.NewReaderSize(f, 64<<10).ReadSlice('\n')
	if err != nil && len(line) == 0 {
		return nil
	}
	line = bytes.TrimPrefix(bytes.TrimSpace(line), []byte("\ufeff"))
	keys := map[string]bool{}
	if len(line) > 0 && line[0] == '{' {
		var rec map[string]json.RawMessage
		if json.Unmarshal(line, &rec) == nil {
			for k := range rec {
				keys[k] = true
			}
			var id string
			if json.Unmarshal(rec["unique_id"], &id) == nil && strings.HasPrefix(id, "test/") {
				keys["unique_id=test/"] = true
			}
		}
		return keys
	}
	if cols, err := csv.NewReader(bytes.NewReader(line)).Read(); err == nil {
		for _, c := range cols {
			keys[strings.TrimSpace(c)] = true
		}
	}
	return keys
}

func parquetColumns(path string) map[string]bool {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return nil
	}
	defer pf.Close()
	keys := map[string]bool{}
	root := pf.MetaData().Schema.Root()
	for i := 0; i < root.NumFields(); i++ {
		keys[root.Field(i).Name()] = true
	}
	return keys
}

func hasAll(set map[string]bool, keys []string) bool {
	for _, k := range keys {
		if !set[k] {
			return false
		}
	}
	return len(keys) > 0
}
