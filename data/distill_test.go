package data

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTeacher is an OpenAI-compatible chat endpoint whose answers and
// failures the tests script. A prompt is known by its last message's
// content.
type fakeTeacher struct {
	srv *httptest.Server
	// fail, when set, may answer an attempt itself (an error, a dropped
	// connection) and return true.
	fail func(w http.ResponseWriter, prompt string, attempt int) bool
	// reply makes the message and finish reason; nil: reasoning inside
	// <think> in the content, finish "stop".
	reply func(prompt string) (msg map[string]any, finish string)
	// gate, when set, runs before answering (to hold requests in flight).
	gate func()
	// maxNumSeqs, when positive, is what /v1/models says the teacher runs
	// at once (as dllm serve does).
	maxNumSeqs int

	mu       sync.Mutex
	attempts map[string]int
	bodies   []map[string]any

	inflight, maxInflight atomic.Int32
}

func newFakeTeacher(t *testing.T) *fakeTeacher {
	f := &fakeTeacher{attempts: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		card := map[string]any{"id": "teacher-2b", "object": "model"}
		if f.maxNumSeqs > 0 {
			card["max_num_seqs"] = f.maxNumSeqs
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{card}})
	})
	mux.HandleFunc("POST /v1/chat/completions", f.chat)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeTeacher) chat(w http.ResponseWriter, r *http.Request) {
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		m := f.maxInflight.Load()
		if n <= m || f.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	msgs, _ := body["messages"].([]any)
	last, _ := msgs[len(msgs)-1].(map[string]any)
	prompt, _ := last["content"].(string)
	f.mu.Lock()
	f.attempts[prompt]++
	attempt := f.attempts[prompt]
	f.bodies = append(f.bodies, body)
	fail, gate, reply := f.fail, f.gate, f.reply
	f.mu.Unlock()
	if fail != nil && fail(w, prompt, attempt) {
		return
	}
	if gate != nil {
		gate()
	}
	msg := map[string]any{"role": "assistant", "content": "<think>\nabout " + prompt + "\n</think>\n\nanswer to " + prompt}
	finish := "stop"
	if reply != nil {
		msg, finish = reply(prompt)
	}
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 5, "completion_tokens": 10, "total_tokens": 15},
	})
}

// attemptsOf returns how often prompt was asked.
func (f *fakeTeacher) attemptsOf(prompt string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts[prompt]
}

func (f *fakeTeacher) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.bodies)
}

// writePrompts writes n prompts p0..p(n-1) asking q0..q(n-1).
func writePrompts(t *testing.T, path string, n int) {
	t.Helper()
	rows := make([]map[string]any, n)
	for i := range rows {
		rows[i] = map[string]any{"id": fmt.Sprintf("p%d", i), "messages": []any{map[string]any{"role": "user", "content": fmt.Sprintf("q%d", i)}}}
	}
	writeJSONL(t, path, rows)
}

// readRecords reads a JSONL output, failing on any line that is not JSON
// or not newline-terminated.
func readRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s does not end with a newline", path)
	}
	var out []map[string]any
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("%s line %d: %v: %q", path, i+1, err, line)
		}
		out = append(out, r)
	}
	return out
}

// ids returns the records' ids (with "#sample" when present), sorted, and
// fails on a repeat.
func ids(t *testing.T, recs []map[string]any) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, r := range recs {
		id := r["id"].(string)
		if s, ok := r["sample"]; ok {
			id += fmt.Sprintf("#%v", s)
		}
		if seen[id] {
			t.Fatalf("id %s written twice", id)
		}
		seen[id] = true
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func distillOpts(f *fakeTeacher, dir string) DistillOptions {
	return DistillOptions{
		Teacher:        f.srv.URL,
		Prompts:        filepath.Join(dir, "prompts.jsonl"),
		Out:            filepath.Join(dir, "out.jsonl"),
		Concurrency:    4,
		MaxTokens:      256,
		Temperature:    0.6,
		TopP:           0.95,
		EnableThinking: true,
		RetryWait:      time.Millisecond,
		MaxRetryWait:   5 * time.Millisecond,
		RequestTimeout: 10 * time.Second,
		SyncEvery:      3,
	}
}

func mustDistill(t *testing.T, o DistillOptions) *DistillStats {
	t.Helper()
	st, err := Distill(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestDistillWritesChatRecords(t *testing.T) {
	dir := t.TempDir()
	f := newFakeTeacher(t)
	writePrompts(t, filepath.Join(dir, "prompts.jsonl"), 3)
	o := distillOpts(f, dir)
	o.ExtraBody = map[string]any{"top_k": 20}
	st := mustDistill(t, o)
	if st.Written != 3 || st.Failed != 0 || st.CompletionTokens != 30 {
		t.Fatalf("stats %+v", st)
	}
	recs := readRecords(t, o.Out)
	if got := ids(t, recs); strings.Join(got, ",") != "p0,p1,p2" {
		t.Fatalf("ids %v", got)
	}
	for _, r := range recs {
		msgs := r["messages"].([]any)
		if len(msgs) != 2 {
			t.Fatalf("messages %v", msgs)
		}
		q := msgs[0].(map[string]any)["content"].(string)
		a := msgs[1].(map[string]any)
		if a["role"] != "assistant" || a["content"] != "answer to "+q || a["reasoning_content"] != "about "+q {
			t.Errorf("assistant message %v", a)
		}
		if r["finish_reason"] != "stop" || r["model"] != "teacher-2b" || r["usage"].(map[string]any)["completion_tokens"] != 10.0 {
			t.Errorf("record %v", r)
		}
		if _, ok := r["truncated"]; ok {
			t.Errorf("truncated set on a complete answer: %v", r)
		}
	}
	// The model was discovered, and the sampling settings were sent.
	f.mu.Lock()
	b := f.bodies[0]
	f.mu.Unlock()
	kw, _ := b["chat_template_kwargs"].(map[string]any)
	if b["model"] != "teacher-2b" || b["max_tokens"] != 256.0 || b["temperature"] != 0.6 || b["top_p"] != 0.95 ||
		b["top_k"] != 20.0 || kw["enable_thinking"] != true || b["stream"] != false {
		t.Errorf("request %v", b)
	}
	// The output is what `dllm data prepare` reads as a chat source.
	src := SourceConfig{Name: "d", Kind: KindChat, Field: "messages", Format: FormatAuto}
	recs2, err := readAll(t, o.Out, src)
	if err != nil || len(recs2) != 3 {
		t.Fatalf("prepare's reader: %d records, %v", len(recs2), err)
	}
	if _, err := os.Stat(st.Errors); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an errors file without errors: %v", err)
	}
	// A rerun has nothing to do.
	if st := mustDistill(t, o); st.Done != 3 || st.Written != 0 || f.requests() != 3 {
		t.Fatalf("rerun: stats %+v, %d requests", st, f.requests())
	}
}

// holdFirst is a teacher's gate that holds each of the first n requests
// until all n are in flight (for at most 5 s), which shows they run at
// once.
func holdFirst(n int) func() {
	var arrived sync.WaitGroup
	arrived.Add(n)
	var first atomic.Int32
	return func() {
		if first.Add(1) <= int32(n) {
			arrived.Done()
			done := make(chan struct{})
			go func() { arrived.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
			}
		}
	}
}

func TestDistillConcurrency(t *testing.T) {
	dir := t.TempDir()
	f := newFakeTeacher(t)
	// The first four requests wait until all four are in flight, which
	// proves they run at once; none may ever exceed four.
	hold := holdFirst(4)
	f.gate = func() {
		hold()
		time.Sleep(2 * time.Millisecond)
	}
	writePrompts(t, filepath.Join(dir, "prompts.jsonl"), 24)
	o := distillOpts(f, dir)
	st := mustDistill(t, o)
	if st.Written != 24 {
		t.Fatalf("stats %+v", st)
	}
	if m := f.maxInflight.Load(); m != 4 {
		t.Fatalf("at most %d requests in flight, want exactly 4", m)
	}
	if got := ids(t, readRecords(t, o.Out)); len(got) != 24 {
		t.Fatalf("%d records", len(got))
	}
}

// Without a concurrency, distill keeps a teacher that says how many
// requests it runs at once (max_num_seqs in /v1/models) full, and runs 8
// against one that does not.
func TestDistillFillsTheTeacher(t *testing.T) {
	for _, c := range []struct{ seqs, want int }{{12, 12}, {0, 8}, {3, 8}} {
		dir := t.TempDir()
		f := newFakeTeacher(t)
		f.maxNumSeqs = c.seqs
		f.gate = holdFirst(c.want)
		writePrompts(t, filepath.Join(dir, "prompts.jsonl"), 3*c.want)
		o := distillOpts(f, dir)
		o.Concurrency, o.Model = 0, ""
		if st := mustDistill(t, o); st.Written != 3*c.want {
			t.Fatalf("stats %+v", st)
		}
		if m := f.maxInflight.Load(); int(m) != c.want {
			t.Errorf("teacher of max_num_seqs %d: at most %d requests in flight, want %d", c.seqs, m, c.want)
		}
	}
}

func TestDistillResumesAfterCrash(t *testing.T) {
	cases := []struct {
		name string
		// tail is what the crash left after the first whole lines.
		tail      func(line []byte) []byte
		keep      int // whole records that survive
		wantCut   bool
		wantAsked int
	}{
		{name: "partial line", tail: func(l []byte) []byte { return l[:len(l)/2] }, keep: 4, wantCut: true, wantAsked: 6},
		{name: "record without its newline", tail: func(l []byte) []byte { return bytes.TrimSuffix(l, []byte("\n")) }, keep: 5, wantAsked: 5},
		{name: "just a brace", tail: func([]byte) []byte { return []byte("{") }, keep: 4, wantCut: true, wantAsked: 6},
		{name: "clean stop", tail: func([]byte) []byte { return nil }, keep: 4, wantAsked: 6},
	}
	// A reference run gives the lines a crashed run would have written.
	refDir := t.TempDir()
	ref := newFakeTeacher(t)
	writePrompts(t, filepath.Join(refDir, "prompts.jsonl"), 10)
	refOpts := distillOpts(ref, refDir)
	refOpts.Concurrency = 1 // in input order
	mustDistill(t, refOpts)
	refBytes, _ := os.ReadFile(refOpts.Out)
	lines := bytes.SplitAfter(refBytes, []byte("\n"))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			f := newFakeTeacher(t)
			writePrompts(t, filepath.Join(dir, "prompts.jsonl"), 10)
			o := distillOpts(f, dir)
			crashed := bytes.Join(lines[:4], nil)
			crashed = append(crashed, c.tail(lines[4])...)
			writeFile(t, o.Out, crashed)
			st := mustDistill(t, o)
			if (st.RepairedBytes > 0) != c.wantCut || st.Done != c.keep || f.requests() != c.wantAsked {
				t.Fatalf("stats %+v, %d requests; want %d kept, %d asked, cut %v", st, f.requests(), c.keep, c.wantAsked, c.wantCut)
			}
			recs := readRecords(t, o.Out)
			if got := ids(t, recs); len(got) != 10 {
				t.Fatalf("ids %v", got)
			}
			// What was written before the crash is still there, byte for byte.
			out, _ := os.ReadFile(o.Out)
			if keep := bytes.Join(lines[:c.keep], nil); !bytes.HasPrefix(out, keep) {
				t.Fatal("the records written before the crash changed")
			}
		})
	}
}

func TestDistillInterruptedAndResumed(t *testing.T) {
	dir := t.TempDir()
	f := newFakeTeacher(t)
	writePrompts(t, filepath.Join(dir, "prompts.jsonl"), 30)
	o := distillOpts(f, dir)
	o.Concurrency = 3
	ctx, cancel := context.WithCancel(context.Background())
	var served atomic.Int32
	f.gate = func() {
		if served.Add(1) == 8 {
			cancel() // Ctrl-C while requests are in flight
		}
		time.Sleep(5 * time.Millisecond)
	}
	st, err := Distill(ctx, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	first := readRecords(t, o.Out)
	if len(first) == 0 || len(first) >= 30 || st.Written != len(first) {
		t.Fatalf("interrupted run wrote %d (stats %+v)", len(first), st)
	}
	if _, err := os.Stat(st.Errors); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("an interruption was logged as a failure")
	}
	f.mu.Lock()
	f.gate = nil
	f.mu.Unlock()
	before := f.requests()
	st = mustDistill(t, o)
	if st.Done != len(first) || st.Written != 30-len(first) || f.requests()-before != 30-len(first) {
		t.Fatalf("resumed: stats %+v, %d requests", st, f.requests()-before)
	}
	if got := ids(t, readRecords(t, o.Out)); len(got) != 30 {
		t.Fatalf("%d records", len(got))
	}
}

func TestDistillRetries(t *testing.T) {
	dir := t.TempDir()
	f := newFakeTeacher(t)
	f.fail = func(w http.ResponseWriter, prompt string, attempt int) bool {
		switch {
		case prompt == "q0" && attempt <= 2:
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"error":{"message":"slow down"}}`))
		case prompt == "q1" && attempt == 1:
			http.Error(w, "loading", http.StatusServiceUnavailable)
		case prompt == "q2" && attempt == 1:
			// The connection drops without an answer.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case prompt == "q3":
			http.Error(w, "down for good", http.StatusBadGateway)
		default:
			return false
		}
		return true
	}
	writePrompts(t, filepath.Join(dir, "prompts.jsonl"), 5)
	o := distillOpts(f, dir)
	o.MaxRetries = 3
	st := mustDistill(t, o)
	if st.Written != 4 || st.Failed != 1 {
		t.Fatalf("stats %+v", st)
	}
	for q, want := range map[string]int{"q0": 3, "q1": 2, "q2": 2, "q3": 4, "q4": 1} {
		if got := f.attemptsOf(q); got != want {
			t.Errorf("%s: %d attempts, want %d", q, got, want)
		}
	}
	errs := readRecords(t, st.Errors)
	if len(errs) != 1 || errs[0]["id"] != "p3" || errs[0]["status"] != 502.0 || errs[0]["attempts"] != 4.0 ||
		!strings.Contains(errs[0]["error"].(string), "down for good") {
		t.Fatalf("errors file %v", errs)
	}
}

func TestDistillErrorFile(t *testing.T) {
	dir := t.TempDir()
	f := newFakeTeacher(t)
	var bad atomic.Bool
	bad.Store(true)
	f.fail = func(w http.ResponseWriter, prompt string, attempt int) bool {
		if prompt == "q1" && bad.Load() {
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":{"message":"prompt is longer than the context","type":"invalid_request_error","param":"messages","code":400}}`))
			return true
		}
		return false
	}
	writePrompts(t, filepath.Join(dir, "prompts.jsonl"), 4)
	o := distillOpts(f, dir)
	st := mustDistill(t, o)
	if st.Written != 3 || st.Failed != 1 || f.attemptsOf("q1") != 1 {
		t.Fatalf("stats %+v, q1 asked %d times (a 400 must not be retried)", st, f.attemptsOf("q1"))
	}
	errs := readRecords(t, st.Errors)
	if len(errs) != 1 || errs[0]["id"] != "p1" || errs[0]["status"] != 400.0 || errs[0]["error"] != "prompt is longer than the context" {
		t.Fatalf("errors file %v", errs)
	}
	if got := ids(t, readRecords(t, o.Out)); strings.Join(got, ",") != "p0,p2,p3" {
		t.Fatalf("ids %v", got)
	}
	// A rerun asks again for what failed, and only that.
	bad.Store(false)
	before := f.requests()
	st = mustDistill(t, o)
	if st.Written != 1 || f.requests()-before != 1 {
		t.Fatalf("rerun: stats %+v", st)
	}
	if len(readRecords(t, st.Errors)) != 1 {
		t.Fatal("the errors file is a log: earlier lines stay")
	}
}

func TestDistillStopsWhenEverythingFails(t *testing.T) {
	dir := t.TempDir()
	f := newFakeTeacher(t)
	f.fail = func(w http.ResponseWriter, prompt string, attempt int) bool {
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"message":"model 'nope' does not exist"}}`))
		return true
	}
	writePrompts(t, filepath.Join(dir, "prompts.jsonl"), 50)
	o := distillOpts(f, dir)
	o.Model = "nope"
	o.Concurrency = 1
	o.MaxConsecutiveErrors = 5
	st, err := Distill(context.Background(), o)
	if !errors.Is(err, errTooManyFailures) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("err %v", err)
	}
	if st.Failed < 5 || st.Failed > 6 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDistillTruncated(t *testing.T) {
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop=%v", drop), func(t *testing.T) {
			dir := t.TempDir()
			f := newFakeTeacher(t)
			f.reply = func(prompt string) (map[string]any, string) {
				if prompt == "q1" {
					// Cut off while still reasoning.
					return map[string]any{"role": "assistant", "content": "<think>\nstill thinking about"}, "length"
				}
				return map[string]any{"role": "assistant", "content": "ok", "reasoning_content": "r"}, "stop"
			}
			writePrompts(t, filepath.Join(dir, "prompts.jsonl"), 3)
			o := distillOpts(f, dir)
			o.DropTruncated = drop
			st := mustDistill(t, o)
			out := readRecords(t, o.Out)
			trunc := readRecords(t, st.TruncatedOut)
			if st.Truncated != 1 {
				t.Fatalf("stats %+v", st)
			}
			var cut map[string]any
			if drop {
				if len(out) != 2 || len(trunc) != 1 || st.Dropped != 1 {
					t.Fatalf("out %d, truncated file %d, stats %+v", len(out), len(trunc), st)
				}
				cut = trunc[0]
			} else {
				if len(out) != 3 || len(trunc) != 0 {
					t.Fatalf("out %d, truncated file %d", len(out), len(trunc))
				}
				for _, r := range out {
					if r["id"] == "p1" {
						cut = r
					}
				}
			}
			a := cut["messages"].([]any)[1].(map[string]any)
			if cut["id"] != "p1" || cut["finish_reason"] != "length" || cut["truncated"] != true ||
				a["reasoning_content"] != "still thinking about" || a["content"] != "" {
				t.Fatalf("truncated record %v", cut)
			}
			// A rerun does not ask again for the dropped answer.
			if st := mustDistill(t, o); st.Done != 3 || st.Written != 0 {
				t.Fatalf("rerun: stats %+v", st)
			}
		})
	}
}

func TestDistillSamples(t *testing.T) {
	dir := t.TempDir()
	f := newFakeTeacher(t)
	writePrompts(t, filepath.Join(dir, "prompts.jsonl"), 3)
	o := distillOpts(f, dir)
	o.Limit = 2
	o.N = 2
	st := mustDistill(t, o)
	got := ids(t, readRecords(t, o.Out))
	if st.Responses != 4 || strings.Join(got, ",") != "p0#0,p0#1,p1#0,p1#1" {
		t.Fatalf("stats %+v, ids %v", st, got)
	}
	// Raising n asks only for the new samples.
	o.N = 3
	if st := mustDistill(t, o); st.Done != 4 || st.Written != 2 {
		t.Fatalf("n=3: stats %+v", st)
	}
}

func TestDistillRefusesEvalSets(t *testing.T) {
	dir := t.TempDir()
	f := newFakeTeacher(t)
	o := distillOpts(f, dir)
	o.Prompts = filepath.Join(dir, "gpqa_diamond.jsonl")
	writePrompts(t, o.Prompts, 2)
	if _, err := Distill(context.Background(), o); err == nil || !strings.Contains(err.Error(), "GPQA") {
		t.Fatalf("err %v", err)
	}
	if f.requests() != 0 {
		t.Fatal("a refused prompts file was sent")
	}
}

func TestDistillPromptFormats(t *testing.T) {
	dir := t.TempDir()
	jsonl := filepath.Join(dir, "mixed.jsonl")
	writeFile(t, jsonl, []byte(strings.Join([]string{
		`{"id": 7, "prompt": "plain text"}`,
		`{"id": "chat", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "old answer"}]}`,
		`{"conversations": [{"from": "human", "value": "sharegpt q"}, {"from": "gpt", "value": "a"}]}`,
		`{"conversations": [{"from": "human", "value": "sharegpt q"}]}`,
		`{"id": "noq", "messages": [{"role": "system", "content": "s"}]}`,
		`{"id": "str", "messages": "[{\"role\": \"user\", \"content\": \"as a string\"}]"}`,
		``,
	}, "\n")))
	parquetPath := filepath.Join(dir, "chats.parquet")
	writeParquet(t, parquetPath, chatSchema, []map[string]any{
		{"id": 1, "messages": []map[string]any{{"role": "user", "content": "pq one"}, {"role": "assistant", "content": "x"}}},
		{"id": 2, "messages": []map[string]any{{"role": "user", "content": "pq two"}}},
	})
	multi := filepath.Join(dir, "multi")
	os.MkdirAll(multi, 0o755)
	writeTemp(t, multi, "a.jsonl", `{"id":1,"prompt":"from a"}`+"\n")
	writeTemp(t, multi, "b.jsonl", `{"id":1,"prompt":"from b"}`+"\n"+`{"prompt":"from b"}`+"\n")
	writeTemp(t, multi, "test.jsonl", `{"id":1,"prompt":"held out"}`+"\n")
	cases := []struct {
		name, path, field string
		limit             int
		want              []string // id: last message content
		wantErr           string
	}{
		{name: "jsonl shapes", path: jsonl, want: []string{
			"7: plain text", "chat: hi", "sha256-: sharegpt q", "str: as a string"}},
		{name: "limit", path: jsonl, limit: 2, want: []string{"7: plain text", "chat: hi"}},
		{name: "parquet", path: parquetPath, want: []string{"sha256-: pq one", "sha256-: pq two"}},
		{name: "parquet wrong column", path: parquetPath, field: "prompt", wantErr: `no column "prompt"`},
		{name: "repeated id", path: writeTemp(t, dir, "rep.jsonl", `{"id":"a","prompt":"x"}`+"\n"+`{"id":"a","prompt":"y"}`+"\n"), wantErr: `line 2: id "a" repeats the id of line 1`},
		{name: "no prompt field", path: writeTemp(t, dir, "nofield.jsonl", `{"id":"a","question":"x"}`+"\n"), wantErr: "no messages, conversations, prompt field"},
		{name: "glob over files", path: filepath.Join(multi, "[ab].jsonl"), want: []string{"a.jsonl:1: from a", "b.jsonl:1: from b", "sha256-: from b"}},
		{name: "glob over a test split", path: filepath.Join(multi, "*.jsonl"), wantErr: "evaluation-set guard"},
		{name: "glob matching nothing", path: filepath.Join(multi, "*.parquet"), wantErr: "no such file"},
		{name: "chosen field", path: writeTemp(t, dir, "q.jsonl", `{"id":"a","question":"x"}`+"\n"), field: "question", want: []string{"a: x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ps, err := loadDistillPrompts(context.Background(), c.path, c.field, c.limit, func(string, ...any) {})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range ps {
				var last struct{ Role, Content string }
				json.Unmarshal(p.messages[len(p.messages)-1], &last)
				if last.Role != "user" {
					t.Errorf("%s ends with %s", p.id, last.Role)
				}
				id := p.id
				if strings.HasPrefix(id, "sha256-") {
					id = "sha256-"
				}
				got = append(got, id+": "+last.Content)
			}
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Fatalf("prompts %q, want %q", got, c.want)
			}
		})
	}
}

func writeTemp(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	writeFile(t, p, []byte(content))
	return p
}

func TestSplitReasoning(t *testing.T) {
	s := func(v string) *string { return &v }
	cases := []struct {
		name                      string
		content, rc, r            *string
		wantReasoning, wantAnswer string
	}{
		{"server split", s("\n\nThe answer is 4."), s("2+2=4\n"), nil, "2+2=4", "The answer is 4."},
		{"vLLM reasoning field", s("4"), nil, s("add"), "add", "4"},
		{"think tags in content", s("<think>\nadd them\n</think>\n\n4"), nil, nil, "add them", "4"},
		{"opening tag in the prompt", s("add them\n</think>\n\n4"), nil, nil, "add them", "4"},
		{"cut off while reasoning", s("<think>\nadd th"), nil, nil, "add th", ""},
		{"no reasoning", s("4"), nil, nil, "", "4"},
		{"null content", nil, s("thinking"), nil, "thinking", ""},
		{"empty reasoning_content falls through", s("<think>x</think>y"), s(""), nil, "x", "y"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, a := splitReasoning(c.content, c.rc, c.r)
			if r != c.wantReasoning || a != c.wantAnswer {
				t.Fatalf("got (%q, %q), want (%q, %q)", r, a, c.wantReasoning, c.wantAnswer)
			}
		})
	}
}

func TestRepairJSONLRefusesForeignLines(t *testing.T) {
	dir := t.TempDir()
	p := writeTemp(t, dir, "out.jsonl", `{"id":"a","messages":[]}`+"\n"+"not json\n"+`{"id":"b"`)
	_, err := repairJSONL(p, func(line []byte) error {
		if !json.Valid(line) {
			return errors.New("not JSON")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err %v", err)
	}
	if b, _ := os.ReadFile(p); !bytes.HasSuffix(b, []byte(`{"id":"b"`)) {
		t.Fatal("a file with a foreign line was changed")
	}
}
