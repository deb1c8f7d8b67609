package eval

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A run with a journal records every answer as it comes; a rerun with the
// same settings asks only what is missing (a failed request, a line cut by
// a crash) and refuses other settings.
func TestJournalResumes(t *testing.T) {
	f := &fakeServer{asked: map[string]int{}, replies: map[string]fakeReply{
		"1+1": {content: "Answer: 2", tokens: 3}, "2+2": {content: "Answer: 4", tokens: 3},
		"3+3": {content: "Answer: 6", tokens: 3}, "bad": {status: 400, fails: 100},
	}}
	ts := httptest.NewServer(f)
	defer ts.Close()
	cl := newTestClient(t, ts.URL)
	cl.Backoff, cl.Retries = time.Millisecond, 0
	items := []Item{item("a", "add", "1+1", "2"), item("b", "add", "2+2", "4"), item("c", "add", "3+3", "6"), item("d", "add", "bad", "1")}
	path := filepath.Join(t.TempDir(), "r.json.partial.jsonl")
	o := Options{Client: cl, Items: items, Concurrency: 2, Journal: path, Settings: map[string]any{"max_tokens": 64}}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Overall.Correct != 3 {
		t.Fatalf("first run: %+v", rep.Overall)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 4 || !strings.Contains(lines[0], `"settings":{"max_tokens":64}`) {
		t.Fatalf("journal:\n%s", b)
	}
	// A crash cut the last line: that item is asked again, as is the
	// failed one; the others are not.
	if err := os.WriteFile(path, b[:len(b)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	before := map[string]int{}
	for q, n := range f.asked {
		before[q] = n
	}
	rep2, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	for q, n := range f.asked {
		if n > before[q] && q != "bad" {
			asked++
		}
	}
	if asked != 1 || f.asked["bad"] <= before["bad"] || rep2.Overall.Correct != 3 || rep2.Overall.N != 4 {
		t.Errorf("rerun asked %d answered items again (want 1, the cut one), bad %d -> %d; %+v", asked, before["bad"], f.asked["bad"], rep2.Overall)
	}
	o.Settings = map[string]any{"max_tokens": 128}
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "other settings") {
		t.Errorf("other settings: %v", err)
	}
}
