package eval

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// LiveCodeBench's files (fixtures of our own in code_generation_lite's
// format): the window by contest date, public then private tests, private
// ones pickled, compressed and base64-encoded, lcb_runner's prompts.
func TestLoadLCB(t *testing.T) {
	items, chance, base, err := LoadSuites([]string{"lcb-v6"}, "testdata/suites", SuiteOptions{Samples: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 || chance["livecodebench_v6"] != 0 || base.Tasks[0].Accuracy != 0.6483 {
		t.Fatalf("%d items, chance %v, base %+v", len(items), chance, base.Tasks)
	}
	ids := []string{items[0].ID, items[1].ID, items[2].ID}
	if strings.Join(ids, " ") != "fx_add fx_max fx_reverse" {
		t.Errorf("ids %v: want the Feb-Apr 2025 problems sorted", ids)
	}
	for _, it := range items {
		if err := it.check(); err != nil {
			t.Error(err)
		}
		if it.Messages[0].Role != "system" || it.Messages[0].Content != lcbSystem || !strings.HasSuffix(it.Messages[1].Content, "### Answer: (use the provided format with backticks)\n\n") {
			t.Errorf("%s: messages %+v", it.ID, it.Messages)
		}
	}
	add, rev := items[0], items[2]
	if len(add.Tests.Cases) != 3 || add.Tests.Cases[0].Input != "1 2\n" || add.Tests.Cases[2].Output != "15\n" || add.Tests.FuncName != "" {
		t.Errorf("fx_add tests %+v", add.Tests)
	}
	if !strings.Contains(add.Messages[1].Content, "### Question:\nYou are given two integers") || !strings.Contains(add.Messages[1].Content, "Read the inputs from stdin solve the problem") {
		t.Errorf("fx_add prompt %q", add.Messages[1].Content)
	}
	if rev.Tests.FuncName != "reverseList" || len(rev.Tests.Cases) != 3 ||
		!strings.Contains(rev.Messages[1].Content, "use the following starter code to write the solution to the problem and enclose your code within delimiters.\n```python\nclass Solution:\n    def reverseList(") {
		t.Errorf("fx_reverse %+v %q", rev.Tests, rev.Messages[1].Content)
	}
	// Another window, over both files; the end is excluded.
	w, err := ParseWindow("2024-12-01:2025-05-01")
	if err != nil {
		t.Fatal(err)
	}
	items, _, _, err = LoadSuites([]string{"lcb-v6"}, "testdata/suites", SuiteOptions{Samples: 2, LCBWindow: w})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 8 || items[0].ID != "fx_add#0" || items[2].ID != "fx_max#0" || items[4].ID != "fx_old#0" {
		t.Errorf("%d items, %s %s %s", len(items), items[0].ID, items[2].ID, items[4].ID)
	}
}

func TestLoadLCBErrors(t *testing.T) {
	for _, c := range []struct{ file, body, want string }{
		{"test6.jsonl", `{"question_id": "a", "question_content": "q", "contest_date": "March 2025"}`, `contest_date "March 2025" is not an ISO date`},
		{"test6.jsonl", `{"question_id": "a", "question_content": "q", "contest_date": "2025-03-01T00:00:00", "public_test_cases": "[]", "private_test_cases": "bm90IHpsaWI="}`, "private_test_cases: zlib"},
		{"test6.jsonl", `{"question_id": "a", "question_content": "q", "contest_date": "2025-03-01T00:00:00", "public_test_cases": "[]", "private_test_cases": "[]"}`, "question a: no test cases"},
		{"test6.jsonl", `{"question_id": "a", "question_content": "q", "contest_date": "2024-03-01T00:00:00"}`, "no problem of"},
		{"notes.txt", "", "livecodebench (docs/eval.md says how to download it)"},
	} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "livecodebench"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "livecodebench", c.file), []byte(c.body+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := LoadSuites([]string{"lcb-v6"}, dir, SuiteOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.body, err, c.want)
		}
	}
	for _, s := range []string{"", "2025-02-01", "2025-05-01:2025-02-01", "2025-02-01:May"} {
		if _, err := ParseWindow(s); err == nil {
			t.Errorf("window %q accepted", s)
		}
	}
}

// The Parquet form of the dataset reads as the JSONL one.
func TestLoadLCBParquet(t *testing.T) {
	b, err := os.ReadFile("testdata/suites/livecodebench/test6.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	fields := make([]arrow.Field, len(lcbColumns))
	for i, n := range lcbColumns {
		fields[i] = arrow.Field{Name: n, Type: arrow.BinaryTypes.String}
	}
	schema := arrow.NewSchema(fields, nil)
	var rows []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, m)
	}
	js, _ := json.Marshal(rows)
	dir := t.TempDir()
	writeParquet(t, filepath.Join(dir, "livecodebench", "test6.parquet"), schema, string(js))
	items, _, _, err := LoadSuites([]string{"lcb-v6"}, dir, SuiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, _, _, _ := LoadSuites([]string{"lcb-v6"}, "testdata/suites", SuiteOptions{})
	if len(items) != len(want) {
		t.Fatalf("%d items from Parquet, %d from JSONL", len(items), len(want))
	}
	for i := range items {
		a, _ := json.Marshal(items[i])
		b, _ := json.Marshal(want[i])
		if string(a) != string(b) {
			t.Errorf("Parquet %s\nJSONL   %s", a, b)
		}
	}
}

// Pickles of a str as Python writes them (protocols 2-5) read back; any
// other opcode is refused, so a crafted file cannot make dllm do more.
func TestUnpickleString(t *testing.T) {
	for _, c := range []struct{ hex, want, err string }{
		{"800258100000005b7b22696e707574223a202231227d5d71002e", `[{"input": "1"}]`, ""},
		{"800358100000005b7b22696e707574223a202231227d5d71002e", `[{"input": "1"}]`, ""},
		{"80049514000000000000008c105b7b22696e707574223a202231227d5d942e", `[{"input": "1"}]`, ""},
		{"80059514000000000000008c105b7b22696e707574223a202231227d5d942e", `[{"input": "1"}]`, ""},
		{"8004953301000000000000582c010000787878", "", "truncated"},
		{"80046305706f736978", "", "opcode 0x63"}, // GLOBAL posix...
		{"80042e", "", "no string"},
		{"80048c0161", "", "no STOP"},
	} {
		b, _ := hex.DecodeString(c.hex)
		got, err := unpickleString(b)
		if c.err == "" && (err != nil || got != c.want) || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %q, %v; want %q, %q", c.hex, got, err, c.want, c.err)
		}
	}
}

// lcb_runner takes the lines between the last two lines holding ```.
func TestExtractLCBCode(t *testing.T) {
	for _, c := range []struct {
		reply, want string
		ok          bool
	}{
		{"Here:\n```python\nprint(1)\n```\nDone.", "print(1)", true},
		{"```python\nx = 1\n```\nBetter:\n```python\nprint(2)\n```", "print(2)", true},
		{"```\nprint(3)\n```", "print(3)", true},
		{"no code at all", "", false},
		{"```python\nprint(1)", "", false},
		{"```python\n```", "", false},
	} {
		got, ok := extractLCBCode(c.reply)
		if got != c.want || ok != c.ok {
			t.Errorf("%q: %q, %v; want %q, %v", c.reply, got, ok, c.want, c.ok)
		}
	}
}

// A run of lcb-v6 tests the replies' programs in the sandbox: a program
// that passes, one that fails a private test, a reply with no code.
func TestLCBRun(t *testing.T) {
	s := testSandbox(t, true)
	items, chance, base, err := LoadSuites([]string{"lcb-v6"}, "testdata/suites", SuiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replies := map[string]fakeReply{}
	code := map[string]string{
		"fx_add":     "Sure.\n```python\na, b = map(int, input().split())\nprint(a + b)\n```",
		"fx_max":     "```python\ninput()\nprint(max(map(int, input().split()), key=abs))\n```", // wrong on the negatives
		"fx_reverse": "def reverseList(nums): return nums[::-1]",                                // no fence
	}
	for _, it := range items {
		replies[it.Messages[1].Content] = fakeReply{content: code[it.ID], tokens: 10}
	}
	f := &fakeServer{asked: map[string]int{}, replies: replies}
	ts := httptest.NewServer(f)
	defer ts.Close()
	cl := newTestClient(t, ts.URL)
	cl.Backoff = time.Millisecond
	if _, err := Run(context.Background(), Options{Client: cl, Items: items, Chance: chance}); err == nil || !strings.Contains(err.Error(), "no sandbox") {
		t.Errorf("a run without a sandbox: %v", err)
	}
	rep, err := Run(context.Background(), Options{Client: cl, Items: items, Chance: chance, Concurrency: 2, Sandbox: s})
	if err != nil {
		t.Fatal(err)
	}
	rep.CompareTo(base)
	ts0 := rep.Tasks[0]
	if ts0.Correct != 1 || ts0.N != 3 || ts0.NoAnswer != 1 {
		t.Errorf("task %+v", ts0)
	}
	v := map[string]string{}
	for _, r := range rep.Items {
		v[r.ID] = r.Verdict
	}
	if v["fx_add"] != "passed 3/3 tests" || !strings.HasPrefix(v["fx_max"], "wrong answer on test 2 of 2: got '-7\\n', want '-5\\n'") || v["fx_reverse"] != "" {
		t.Errorf("verdicts %q", v)
	}
}
