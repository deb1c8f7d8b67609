package serve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestQueueFIFO: turns are handed out in arrival order, cancelled waiters
// leave the line, and the bound counts only waiters.
func TestQueueFIFO(t *testing.T) {
	q := newQueue(3)
	first, err := q.enqueue()
	if err != nil || first.wait(context.Background()) != nil {
		t.Fatal("first ticket not granted at once")
	}
	var tickets []*ticket
	for range 3 {
		tk, err := q.enqueue()
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	if _, err := q.enqueue(); !errors.Is(err, errQueueFull) {
		t.Fatalf("4th waiter: %v, want errQueueFull", err)
	}
	// The middle one gives up; its place is freed.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tickets[1].wait(ctx); err == nil {
		t.Fatal("cancelled wait succeeded")
	}
	late, err := q.enqueue()
	if err != nil {
		t.Fatal("place not freed:", err)
	}
	order := []*ticket{tickets[0], tickets[2], late}
	q.release()
	for i, tk := range order {
		select {
		case <-tk.granted:
		case <-time.After(time.Second):
			t.Fatalf("ticket %d not granted", i)
		}
		for _, other := range order[i+1:] {
			select {
			case <-other.granted:
				t.Fatal("granted out of order")
			default:
			}
		}
		q.release()
	}
	if r, w, _ := q.depth(); r != 0 || w != 0 {
		t.Errorf("depth %d/%d after all released", r, w)
	}
}

// With several slots, that many requests run at once, the rest wait in
// arrival order, the bound counts only waiters, and more slots let
// waiters in at once.
func TestQueueSlots(t *testing.T) {
	q := newQueue(2)
	q.setSlots(2)
	granted := func(tk *ticket) bool {
		select {
		case <-tk.granted:
			return true
		default:
			return false
		}
	}
	var tks []*ticket
	for range 4 {
		tk, err := q.enqueue()
		if err != nil {
			t.Fatal(err)
		}
		tks = append(tks, tk)
	}
	if _, err := q.enqueue(); !errors.Is(err, errQueueFull) {
		t.Fatalf("5th request with 2 running and 2 waiting: %v, want errQueueFull", err)
	}
	if !granted(tks[0]) || !granted(tks[1]) || granted(tks[2]) || granted(tks[3]) {
		t.Fatal("want the first two running, the others waiting")
	}
	if r, w, n := q.depth(); r != 2 || w != 2 || n != 2 {
		t.Errorf("depth %d running, %d waiting of %d slots; want 2, 2, 2", r, w, n)
	}
	q.release()
	if !granted(tks[2]) || granted(tks[3]) {
		t.Fatal("a release should let the next one in, and only it")
	}
	q.setSlots(3)
	if !granted(tks[3]) {
		t.Fatal("a third slot should let the last one in")
	}
	for range 3 {
		q.release()
	}
	if r, w, _ := q.depth(); r != 0 || w != 0 {
		t.Errorf("depth %d/%d after all released", r, w)
	}
}

// TestQueueFull: with the engine busy and the queue full, a request gets
// 503 with Retry-After; the others complete, one at a time.
func TestQueueFull(t *testing.T) {
	eng := &fakeEngine{output: "abcd", eos: true, gate: make(chan struct{}), started: make(chan struct{}, 10)}
	s, ts := testServer(t, eng, Config{MaxQueue: 1})
	body := `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}`
	var wg sync.WaitGroup
	statuses := make(chan int, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := post(t, ts.URL+"/v1/chat/completions", body)
			statuses <- resp.StatusCode
		}()
	}
	<-eng.started                                                         // one runs...
	waitFor(t, func() bool { _, w, _ := s.queue.depth(); return w == 1 }) // ...one waits
	resp, b := post(t, ts.URL+"/v1/chat/completions", body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if e := decodeError(t, b); e.Error.Code == nil || *e.Error.Code != "queue_full" {
		t.Errorf("error = %s", b)
	}
	close(eng.gate)
	wg.Wait()
	for range 2 {
		if st := <-statuses; st != 200 {
			t.Errorf("queued request: %d", st)
		}
	}
	if eng.maxRun != 1 {
		t.Errorf("%d generations ran at once", eng.maxRun)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDisconnectCancels: a client that hangs up mid-stream cancels its
// generation, which frees the engine for the next request.
func TestDisconnectCancels(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "whole"}[stream], func(t *testing.T) {
			gate := make(chan struct{})
			eng := &fakeEngine{output: "abcdefgh", gate: gate, started: make(chan struct{}, 1)}
			s, ts := testServer(t, eng, Config{})
			ctx, cancel := context.WithCancel(context.Background())
			body := `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1000,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					buf := make([]byte, 1)
					resp.Body.Read(buf) // the role chunk
					<-ctx.Done()
					resp.Body.Close()
				}
			}()
			<-eng.started
			gate <- struct{}{} // one block, then the client hangs up
			cancel()
			<-done
			waitFor(t, func() bool {
				eng.mu.Lock()
				defer eng.mu.Unlock()
				return eng.running == 0
			})
			if !errors.Is(eng.ctxErr, context.Canceled) {
				t.Errorf("engine ctx: %v, want canceled", eng.ctxErr)
			}
			waitFor(t, func() bool { r, _, _ := s.queue.depth(); return r == 0 })
			eng.gate = nil
			resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3}`)
			decodeChat(t, resp, b)
		})
	}
}

// TestEnginePanic: a panicking engine gives a 500, frees the queue and
// leaves the server running.
func TestEnginePanic(t *testing.T) {
	eng := &fakeEngine{output: "fine", eos: true, panicWith: "boom"}
	_, ts := testServer(t, eng, Config{})
	resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	if resp.StatusCode != 500 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	decodeError(t, b)
	// A panic after the stream started ends the stream instead.
	_, b = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"stream":true}`)
	if s := parseStream(t, b); len(s.chunks) < 2 || s.chunks[0].Choices[0].Delta.Role == nil || s.chunks[len(s.chunks)-1].Error == nil || !s.done {
		t.Errorf("stream not ended by an error event and [DONE]: %s", b)
	}
	eng.panicWith = nil
	resp, b = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	if r := decodeChat(t, resp, b); r.Choices[0].Message.Content != "fine" {
		t.Errorf("after panic: %s", b)
	}
}

// TestEngineErrors maps engine failures to statuses, whole and streamed.
func TestEngineErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
	}{
		{errors.New("CUDA out of memory"), 500},
		{errContextTooLong, 400},
		{errInvalidRequest, 400},
	} {
		eng := &fakeEngine{err: tc.err}
		_, ts := testServer(t, eng, Config{})
		resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
		if resp.StatusCode != tc.status {
			t.Errorf("%v: status %d: %s", tc.err, resp.StatusCode, b)
		}
		decodeError(t, b)
		_, b = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"stream":true}`)
		s := parseStream(t, b)
		if last := s.chunks[len(s.chunks)-1]; last.Error == nil || !s.done {
			t.Errorf("%v: stream did not end with an error event and [DONE]: %s", tc.err, b)
		}
	}
}

// TestTimeout: a generation past the request timeout is cancelled: 504.
func TestTimeout(t *testing.T) {
	eng := &fakeEngine{output: "slow", gate: make(chan struct{})}
	_, ts := testServer(t, eng, Config{RequestTimeout: 50 * time.Millisecond})
	resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	decodeError(t, b)
	if !errors.Is(eng.ctxErr, context.DeadlineExceeded) {
		t.Errorf("engine ctx: %v", eng.ctxErr)
	}
}

// TestQueuedCancelLog: a stream whose client leaves while it waits in the
// queue is logged as a 499 with the time it waited and no generation
// figures (it never reached the model).
func TestQueuedCancelLog(t *testing.T) {
	eng := &fakeEngine{output: "abcd", eos: true, gate: make(chan struct{}), started: make(chan struct{}, 10)}
	var logs syncBuffer
	s, ts := testServer(t, eng, Config{MaxQueue: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ran := make(chan struct{})
	go func() {
		post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}`)
		close(ran)
	}()
	<-eng.started
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan struct{})
	go func() {
		defer close(left)
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions",
			strings.NewReader(`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { _, w, _ := s.queue.depth(); return w == 1 })
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-left
	waitFor(t, func() bool { return strings.Contains(logs.String(), "status=499") })
	close(eng.gate)
	<-ran
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "status=499") {
			line = l
		}
	}
	m := regexp.MustCompile(`queued=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no queued time: %s", line)
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d < 100*time.Millisecond {
		t.Errorf("queued=%s, want the ~100 ms it waited: %s", m[1], line)
	}
	for _, field := range []string{"generated_tokens", "steps=", "tpf=", "tok_s=", "prefill="} {
		if strings.Contains(line, field) {
			t.Errorf("a request that never ran logs %s: %s", field, line)
		}
	}
}
