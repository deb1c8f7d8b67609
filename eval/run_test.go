package eval

import (
	"bytes"
	"context"
	"dllm/openai"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeServer answers chat completions from a table keyed by the user's
// message: the reply's content and reasoning, and an HTTP status to give
// the first `fails` times it is asked.
type fakeServer struct {
	mu      sync.Mutex
	replies map[string]fakeReply
	asked   map[string]int
	bodies  []map[string]any
}

type fakeReply struct {
	content, reasoning string
	status, fails      int
	tokens, steps      int
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
		return
	}
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	msgs := body["messages"].([]any)
	q := msgs[len(msgs)-1].(map[string]any)["content"].(string)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	rep := f.replies[q]
	f.asked[q]++
	n := f.asked[q]
	f.mu.Unlock()
	if n <= rep.fails {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(rep.status)
		fmt.Fprintf(w, `{"error":{"message":"try again (%d)","type":"x","param":null,"code":null}}`, rep.status)
		return
	}
	usage := map[string]any{"prompt_tokens": 5, "completion_tokens": rep.tokens}
	if rep.steps > 0 {
		// As if verify decoding checked two tokens per step and kept half.
		usage["dllm"] = map[string]any{"steps": rep.steps, "tpf": float64(rep.tokens) / float64(rep.steps), "checked": 2 * rep.steps, "accepted": rep.steps}
	}
	json.NewEncoder(w).Encode(map[string]any{
		"object": "chat.completion",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": rep.content, "reasoning_content": rep.reasoning}}},
		"usage": usage,
	})
}

func item(id, task, q, answer string, choices ...string) Item {
	return Item{ID: id, Task: task, Messages: []Message{{Role: "user", Content: q}}, Answer: answer, Choices: choices}
}

func TestRun(t *testing.T) {
	f := &fakeServer{asked: map[string]int{}, replies: map[string]fakeReply{
		"1+1":   {content: "Answer: 2", reasoning: "1+1=2", tokens: 10, steps: 4},
		"2+2":   {content: "Answer: 5", tokens: 10, steps: 4},                                              // wrong
		"3+3":   {content: "", reasoning: "3+3=6\nAnswer: 6", tokens: 20, steps: 8, status: 503, fails: 2}, // retried, then right
		"4+4":   {content: "no idea", tokens: 20, steps: 4},                                                // no answer
		"which": {content: "Answer: B", tokens: 4, steps: 2},
		"bad":   {status: 400, fails: 100},
	}}
	ts := httptest.NewServer(f)
	defer ts.Close()
	items := []Item{
		item("a1", "add", "1+1", "2"), item("a2", "add", "2+2", "4"), item("a3", "add", "3+3", "6"),
		item("a4", "add", "4+4", "8"), item("a5", "add", "bad", "1"),
		item("m1", "mcq", "which", "B", "x", "y", "z", "w"),
	}
	cl := newTestClient(t, ts.URL+"/v1/")
	cl.Backoff = time.Millisecond
	temp, think := 0.0, true
	var prog bytes.Buffer
	rep, err := Run(context.Background(), Options{Client: cl, Items: items, Concurrency: 3, MaxTokens: 64, Model: "m",
		Temperature: &temp, EnableThinking: &think, Extra: map[string]any{"threshold": 0.8}, Progress: &prog})
	if err != nil {
		t.Fatal(err)
	}
	add, mcq := rep.Tasks[0], rep.Tasks[1]
	if add.Task != "add" || add.N != 5 || add.Correct != 2 || add.Errors != 1 || add.NoAnswer != 1 || add.Chance != 0 {
		t.Errorf("add = %+v", add)
	}
	if se := math.Sqrt(0.4 * 0.6 / 5); math.Abs(add.StdErr-se) > 1e-12 {
		t.Errorf("add stderr %v, want %v", add.StdErr, se)
	}
	if add.Tokens != 60 || add.TPF == nil || *add.TPF != 60.0/20 {
		t.Errorf("add tokens %d, tpf %v", add.Tokens, add.TPF)
	}
	if add.Checked != 40 || add.Acceptance == nil || *add.Acceptance != 0.5 {
		t.Errorf("add checked %d, acceptance %v", add.Checked, add.Acceptance)
	}
	if mcq.Accuracy != 1 || mcq.Chance != 0.25 {
		t.Errorf("mcq = %+v", mcq)
	}
	if rep.Overall.N != 6 || rep.Overall.Correct != 3 || rep.Overall.Task != "all" {
		t.Errorf("overall = %+v", rep.Overall)
	}
	if r := rep.Items[4]; !strings.Contains(r.Error, "400") || r.Correct {
		t.Errorf("the 400 item: %+v", r)
	}
	if f.asked["3+3"] != 3 || f.asked["bad"] != 1 {
		t.Errorf("attempts: %v (503 should be retried, 400 not)", f.asked)
	}
	b := f.bodies[0]
	if b["model"] != "m" || b["max_tokens"] != 64.0 || b["temperature"] != 0.0 || b["threshold"] != 0.8 ||
		b["chat_template_kwargs"].(map[string]any)["enable_thinking"] != true {
		t.Errorf("request body %v", b)
	}
	if !strings.Contains(prog.String(), "eval: 6/6 (100%)") {
		t.Errorf("progress:\n%s", prog.String())
	}

	// Limit keeps the first item of each task; chance from tasks.json wins.
	rep, err = Run(context.Background(), Options{Client: cl, Items: items, Limit: 1, Chance: map[string]float64{"mcq": 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Overall.N != 2 || rep.Tasks[1].Chance != 0.5 {
		t.Errorf("limited run: %+v", rep.Tasks)
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	cl := newTestClient(t, "http://"+addr)
	cl.Retries, cl.Backoff = 1, time.Millisecond
	if _, err := cl.Models(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Fatalf("error %v", err)
	}
	_, err = Run(context.Background(), Options{Client: cl, Items: []Item{item("a", "t", "q", "1"), item("b", "t", "q", "1")}})
	if err == nil || !strings.Contains(err.Error(), "stopped answering") {
		t.Fatalf("run error %v", err)
	}
}

func TestCompareAndPrint(t *testing.T) {
	base := &Report{Tasks: []TaskSummary{{Task: "add", Accuracy: 0.8}, {Task: "mcq", Accuracy: 0.25, Chance: 0.25}}}
	tpf := 3.0
	r := &Report{Tasks: []TaskSummary{{Task: "add", N: 10, Accuracy: 0.6, TPF: &tpf}, {Task: "mcq", Accuracy: 0.5, Chance: 0.25}}}
	r.CompareTo(base)
	if n := r.Tasks[0].Normalized; n == nil || *n != 75 {
		t.Errorf("add normalised %v, want 75", n)
	}
	if r.Tasks[1].Normalized != nil {
		t.Error("a baseline at chance gave a normalised score")
	}
	if r.MeanNormalized == nil || *r.MeanNormalized != 75 {
		t.Errorf("mean %v", r.MeanNormalized)
	}
	var out bytes.Buffer
	r.PrintTable(&out)
	for _, want := range []string{"normalised", "75.0", "3.00", "mean normalised score over tasks: 75.0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	path := t.TempDir() + "/r.json"
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(path)
	if err != nil || back.Tasks[0].Accuracy != 0.6 || *back.Tasks[0].TPF != 3 {
		t.Fatalf("%+v %v", back, err)
	}
}

// newTestClient is a client of url that retries without waiting long.
func newTestClient(t *testing.T, url string) *openai.Client {
	t.Helper()
	cl, err := openai.New(url)
	if err != nil {
		t.Fatal(err)
	}
	cl.Backoff, cl.MaxBackoff = time.Millisecond, time.Millisecond
	return cl
}
