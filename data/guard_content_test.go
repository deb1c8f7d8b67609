package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// The benchmarks' official files are refused by their shape whatever they
// are named; files of other shapes, and MATH's train split in MATH-500's
// layout, are not. (Fixtures in the formats, not benchmark items.)
func TestGuardByContent(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mmlu := filepath.Join(dir, "science.parquet")
	var fields []arrow.Field
	for _, c := range []string{"question", "answer", "cot_content", "category", "src"} {
		fields = append(fields, arrow.Field{Name: c, Type: arrow.BinaryTypes.String})
	}
	fields = append(fields, arrow.Field{Name: "question_id", Type: arrow.PrimitiveTypes.Int64},
		arrow.Field{Name: "answer_index", Type: arrow.PrimitiveTypes.Int64},
		arrow.Field{Name: "options", Type: arrow.ListOf(arrow.BinaryTypes.String)})
	writeParquet(t, mmlu, arrow.NewSchema(fields, nil), []map[string]any{{"question": "q", "answer": "A", "cot_content": "", "category": "x", "src": "y",
		"question_id": 1, "answer_index": 0, "options": []string{"a", "b"}}})
	cases := []struct {
		path, want string // want: the benchmark named, "" for allowed
	}{
		{write("questions.csv", "Pre-Revision Question,Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3,Record ID\nx,q,a,b,c,d,r\n"), "GPQA"},
		{write("mix.jsonl", `{"problem": "p", "solution": "s", "answer": "1", "subject": "Algebra", "level": 1, "unique_id": "test/algebra/1.json"}`+"\n"), "MATH-500"},
		{write("math-train.jsonl", `{"problem": "p", "solution": "s", "answer": "1", "subject": "Algebra", "level": 1, "unique_id": "train/algebra/1.json"}`+"\n"), ""},
		{mmlu, "MMLU-Pro"},
		{write("code.jsonl", `{"question_title": "t", "question_content": "c", "platform": "atcoder", "question_id": "abc1", "contest_id": "abc", "contest_date": "2025-03-01", "starter_code": "", "difficulty": "easy", "public_test_cases": "[]", "private_test_cases": "x", "metadata": "{}"}`+"\n"), "LiveCodeBench"},
		{write("chats.jsonl", `{"messages": [{"role": "user", "content": "Question"}]}`+"\n"), ""},
		{write("table.csv", "Question,Answer\nq,a\n"), ""},
		{dir, ""},
	}
	for _, c := range cases {
		err := CheckNotEvalSet("source", c.path)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", filepath.Base(c.path), err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), "benchmark "+c.want+"'s official file")):
			t.Errorf("%s: %v, want a refusal naming %s", filepath.Base(c.path), err, c.want)
		}
	}
}
