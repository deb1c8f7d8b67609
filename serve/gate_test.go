package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestGate: at most n requests prepare at once and at most n/4 heavy
// ones; a request that finds no slot in time, or whose client leaves, is
// refused with a 503 that says when to retry.
func TestGate(t *testing.T) {
	g := newGate(4, 30*time.Millisecond)
	ctx := context.Background()
	var held []func()
	enter := func(size int) *apiError {
		done, e := g.enter(ctx, size)
		if e == nil {
			held = append(held, done)
		}
		return e
	}
	if e := enter(heavyBytes); e != nil {
		t.Fatalf("first heavy request refused: %v", e)
	}
	if e := enter(heavyBytes); e == nil || e.Status != http.StatusServiceUnavailable || e.RetryAfter < 1 {
		t.Fatalf("second heavy request beside the first: %+v, want 503 with Retry-After", e)
	}
	for i := range 3 {
		if e := enter(100); e != nil {
			t.Fatalf("small request %d refused while slots were free: %v", i, e)
		}
	}
	if e := enter(100); e == nil || *e.Code != "server_busy" {
		t.Fatalf("fifth request with 4 slots: %+v, want server_busy", e)
	}
	// A heavy request refused for want of a slot gives back the heavy one.
	held[0]()
	if e := enter(100); e != nil {
		t.Fatalf("small request refused with a slot free: %v", e)
	}
	if e := enter(heavyBytes); e == nil {
		t.Fatal("heavy request admitted with every slot taken")
	}
	held[1]()
	if e := enter(heavyBytes); e != nil {
		t.Fatalf("heavy request refused with a slot and the heavy slot free: %v", e)
	}
	// A client that leaves stops waiting at once.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	slow := newGate(1, time.Hour)
	slow.enter(ctx, 1)
	start := time.Now()
	if _, e := slow.enter(gone, 1); e == nil || time.Since(start) > time.Second {
		t.Fatalf("a request whose client left: %v after %v", e, time.Since(start))
	}
}

// TestBusyPreparing: the handlers go through the gate; with every slot
// taken a chat and a completion are 503 server_busy with Retry-After.
func TestBusyPreparing(t *testing.T) {
	s, ts := testServer(t, &fakeEngine{output: "x"}, Config{MaxPreparing: 1})
	s.gate.wait = 20 * time.Millisecond
	s.gate.slots <- struct{}{} // another request is preparing
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/completions", `{"prompt":"hi"}`},
	} {
		resp, b := post(t, ts.URL+c.path, c.body)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "server_busy") {
			t.Errorf("%s: %d %q %s, want 503 server_busy with Retry-After", c.path, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	<-s.gate.slots
	if resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
		t.Fatalf("after the slot freed: %d %s", resp.StatusCode, b)
	}
}

// TestMaxMessages: a chat with more messages than the limit is a 400
// before its template runs; one at the limit is served.
func TestMaxMessages(t *testing.T) {
	_, ts := testServer(t, &fakeEngine{output: "x"}, Config{MaxMessages: 8})
	chat := func(n int) string {
		msgs := make([]map[string]string, n)
		for i := range msgs {
			msgs[i] = map[string]string{"role": []string{"user", "assistant"}[i%2], "content": "hi"}
		}
		if n%2 == 0 {
			msgs = append(msgs[:n-1], map[string]string{"role": "user", "content": "hi"})
		}
		b, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": 1})
		return string(b)
	}
	if resp, b := post(t, ts.URL+"/v1/chat/completions", chat(8)); resp.StatusCode != 200 {
		t.Fatalf("8 messages: %d %s", resp.StatusCode, b)
	}
	resp, b := post(t, ts.URL+"/v1/chat/completions", chat(9))
	e := decodeError(t, b)
	if resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != "messages" || !strings.Contains(e.Error.Message, fmt.Sprint(8)) {
		t.Fatalf("9 messages: %d %s", resp.StatusCode, b)
	}
}
