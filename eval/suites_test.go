package eval

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// The suites read their official file formats (fixtures written in them,
// not benchmark items): MATH-500's JSONL, GPQA's CSV with quoted commas,
// newlines and extra columns.
func TestLoadSuites(t *testing.T) {
	items, chance, base, err := LoadSuites([]string{"math-500", "gpqa-diamond"}, "testdata/suites", SuiteOptions{Samples: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 6 || chance["math_500"] != 0 || chance["gpqa_diamond"] != 0.25 || len(base.Tasks) != 2 || base.Tasks[1].Accuracy != 0.6717 {
		t.Fatalf("%d items, chance %v, base %+v", len(items), chance, base.Tasks)
	}
	m := items[0]
	if m.ID != "test/prealgebra/9001.json" || m.Format != FormatMath || m.Answer != `\frac{2}{5}` ||
		!strings.HasSuffix(m.Messages[0].Content, "\nPlease reason step by step, and put your final answer within \\boxed{}.") {
		t.Errorf("MATH-500 item %+v", m)
	}
	correct := map[string]string{"recFixture0001": "The photon", "recFixture0002": "1e-3", "recFixture0003": "The chloroplast"}
	var orders [][]string
	for _, it := range items[3:] {
		if err := it.check(); err != nil {
			t.Fatal(err)
		}
		if got := it.Choices[it.Answer[0]-'A']; got != correct[it.ID] {
			t.Errorf("%s: answer %s is %q, want %q", it.ID, it.Answer, got, correct[it.ID])
		}
		p := it.Messages[0].Content
		if !strings.HasPrefix(p, "Answer the following multiple choice question. The last line of your response should be of the following format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD.") ||
			!strings.Contains(p, "\nA) "+it.Choices[0]+"\nB) ") {
			t.Errorf("%s: prompt %q", it.ID, p)
		}
		orders = append(orders, it.Choices)
	}
	if !strings.Contains(items[5].Messages[0].Content, "\nChoose one.") || !slices.Contains(items[5].Choices, `The nucleus, "the control centre"`) {
		t.Errorf("quoted CSV fields: %+v", items[5])
	}
	// The same file gives the same option order.
	again, _, _, _ := LoadSuites([]string{"gpqa-diamond"}, "testdata/suites", SuiteOptions{Samples: 1})
	for i, it := range again {
		if !slices.Equal(it.Choices, orders[i]) {
			t.Errorf("%s: order %v, then %v", it.ID, orders[i], it.Choices)
		}
	}
}

func TestLoadSuitesErrors(t *testing.T) {
	for _, c := range []struct {
		names []string
		dir   string
		want  string
	}{
		{[]string{"mmlu"}, "testdata/suites", `unknown suite "mmlu"`},
		{[]string{"math-500"}, t.TempDir(), "docs/eval.md says how to download it"},
		{[]string{"math-500", "gpqa-diamond"}, "testdata", "no testdata/math-500/test.jsonl"},
	} {
		_, _, _, err := LoadSuites(c.names, c.dir, SuiteOptions{Samples: 1})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v in %s: %v, want %q", c.names, c.dir, err, c.want)
		}
	}
}

// A suite run scores the replies as the references would and normalises
// against the AR original's table, clamped to 0..100.
func TestSuiteRun(t *testing.T) {
	items, chance, base, err := LoadSuites([]string{"math-500", "gpqa-diamond"}, "testdata/suites", SuiteOptions{Samples: 1})
	if err != nil {
		t.Fatal(err)
	}
	replies := map[string]fakeReply{}
	for i, it := range items {
		r := fakeReply{tokens: 10, steps: 5}
		switch {
		case it.Format == FormatMath && i == 0:
			r.content = `So the answer is $\boxed{0.4}$.` // equal to 2/5
		case it.Format == FormatMath && i == 1:
			r.content = `\boxed{3,2}` // a list in another order
		case it.Format == FormatMath:
			r.content = `\boxed{60}` // wrong
		default:
			r.content = "Reasoning...\nAnswer: " + it.Answer // every GPQA item right
		}
		replies[it.Messages[0].Content] = r
	}
	f := &fakeServer{asked: map[string]int{}, replies: replies}
	ts := httptest.NewServer(f)
	defer ts.Close()
	cl := newTestClient(t, ts.URL)
	cl.Backoff = time.Millisecond
	rep, err := Run(context.Background(), Options{Client: cl, Items: items, Chance: chance, Concurrency: 2, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	rep.CompareTo(base)
	rep.ClampNormalized()
	got := map[string]TaskSummary{}
	for _, ts := range rep.Tasks {
		got[ts.Task] = ts
	}
	math, gpqa := got["math_500"], got["gpqa_diamond"]
	if math.Correct != 2 || gpqa.Correct != 3 {
		t.Fatalf("math %+v\ngpqa %+v", math, gpqa)
	}
	// math: 100*(2/3)/0.98 = 68.0; gpqa: 100*(1-0.25)/(0.6717-0.25) = 177.9, clamped.
	if *math.Normalized < 68 || *math.Normalized > 68.1 || *gpqa.Normalized != 100 || *rep.MeanNormalized < 84 || *rep.MeanNormalized > 84.1 {
		t.Errorf("normalised math %v, gpqa %v, mean %v", *math.Normalized, *gpqa.Normalized, *rep.MeanNormalized)
	}
}

// MMLU-Pro's test file is Parquet: question_id, question, options (a list,
// "N/A" padding dropped), answer (a letter) and columns eval ignores.
func TestLoadMMLUPro(t *testing.T) {
	dir := t.TempDir()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "question_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "question", Type: arrow.BinaryTypes.String},
		{Name: "options", Type: arrow.ListOf(arrow.BinaryTypes.String)},
		{Name: "answer", Type: arrow.BinaryTypes.String},
		{Name: "answer_index", Type: arrow.PrimitiveTypes.Int64},
		{Name: "category", Type: arrow.BinaryTypes.String},
	}, nil)
	rows := `[
		{"question_id": 70, "question": "Which gas do plants take in for photosynthesis?", "options": ["Oxygen", "Carbon dioxide", "Nitrogen", "Helium", "Argon", "Neon", "Hydrogen", "Methane", "Ozone", "Water vapour"], "answer": "B", "answer_index": 1, "category": "biology"},
		{"question_id": 71, "question": "What is 2+2?", "options": ["3", "4", "5", "N/A"], "answer": "B", "answer_index": 1, "category": "math"}
	]`
	writeParquet(t, filepath.Join(dir, Suites["mmlu-pro"].File), schema, rows)
	items, chance, _, err := LoadSuites([]string{"mmlu-pro"}, dir, SuiteOptions{Samples: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || chance["mmlu_pro"] != 0.1111 {
		t.Fatalf("%d items, chance %v", len(items), chance)
	}
	a, b := items[0], items[1]
	if a.ID != "mmlu_pro-70" || a.Answer != "B" || len(a.Choices) != 10 || !strings.Contains(a.Messages[0].Content, "one of ABCDEFGHIJ.") ||
		!strings.Contains(a.Messages[0].Content, "\nJ) Water vapour") {
		t.Errorf("item %+v", a)
	}
	if len(b.Choices) != 3 || !strings.Contains(b.Messages[0].Content, "one of ABC.") {
		t.Errorf("N/A kept: %+v", b)
	}
	for _, it := range items {
		if err := it.check(); err != nil {
			t.Error(err)
		}
	}
}

// --samples repeats every question; GPQA's samples each get their own
// option order, and requests with a seed get seed + the sample's number.
func TestSuiteSamples(t *testing.T) {
	items, _, _, err := LoadSuites([]string{"math-500", "gpqa-diamond"}, "testdata/suites", SuiteOptions{Samples: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 18 || items[0].ID != "test/prealgebra/9001.json#0" || items[2].Repeat != 2 {
		t.Fatalf("%d items, first %q, third repeat %d", len(items), items[0].ID, items[2].Repeat)
	}
	orders := map[string]bool{}
	for _, it := range items[9:] {
		if err := it.check(); err != nil {
			t.Fatal(err)
		}
		correct := it.Choices[it.Answer[0]-'A']
		if !strings.HasPrefix(correct, "The photon") && correct != "1e-3" && correct != "The chloroplast" {
			t.Errorf("%s: answer %s = %q", it.ID, it.Answer, correct)
		}
		orders[strings.Join(it.Choices, "|")] = true
	}
	if len(orders) < 5 {
		t.Errorf("only %d option orders over 9 GPQA samples", len(orders))
	}
	f := &fakeServer{asked: map[string]int{}, replies: map[string]fakeReply{}}
	ts := httptest.NewServer(f)
	defer ts.Close()
	cl := newTestClient(t, ts.URL)
	cl.Backoff = time.Millisecond
	seed := int64(100)
	if _, err := Run(context.Background(), Options{Client: cl, Items: items[:3], Concurrency: 1, Model: "m", Seed: &seed}); err != nil {
		t.Fatal(err)
	}
	var seeds []float64
	for _, b := range f.bodies {
		seeds = append(seeds, b["seed"].(float64))
	}
	if !slices.Equal(seeds, []float64{100, 101, 102}) {
		t.Errorf("seeds %v", seeds)
	}
}

// --limit counts questions, keeping each one's samples.
func TestLimitKeepsSamples(t *testing.T) {
	items, _, _, err := LoadSuites([]string{"math-500", "gpqa-diamond"}, "testdata/suites", SuiteOptions{Samples: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := Limit(items, 1)
	var ids []string
	for _, it := range got {
		ids = append(ids, it.ID)
	}
	if len(got) != 4 || got[0].ID != "test/prealgebra/9001.json#0" || got[1].ID != "test/prealgebra/9001.json#1" || got[2].ID != "recFixture0001#0" {
		t.Errorf("kept %v", ids)
	}
}

// writeParquet writes rows (a JSON array of objects) of schema to path,
// making its directory.
func writeParquet(t *testing.T, path string, schema *arrow.Schema, rows string) {
	t.Helper()
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(rows))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(schema, f, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
