package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"dllm/diffusion"
	"dllm/serve/api"
)

// TestContentType: a body declared as anything but JSON is a 415 before
// it is read; JSON types with parameters or suffixes, and no type at all,
// are accepted.
func TestContentType(t *testing.T) {
	eng := &fakeEngine{output: "ok", eos: true}
	_, ts := testServer(t, eng, Config{})
	body := `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}`
	for _, tc := range []struct {
		ct     string
		status int
	}{
		{"", 200},
		{"application/json", 200},
		{"application/json; charset=utf-8", 200},
		{"Application/JSON", 200},
		{"application/vnd.api+json", 200},
		{"text/json", 200},
		{"text/plain", 415},
		{"text/plain; charset=utf-8", 415},
		{"application/x-www-form-urlencoded", 415}, // curl -d without -H
		{"multipart/form-data; boundary=x", 415},
		{"application/jsonx", 415},
		{"json", 415},
		{";;;", 415},
	} {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			b := body
			if path == "/v1/completions" {
				b = `{"prompt":"Hi","max_tokens":2}`
			}
			req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(b))
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			resp, rb := do(t, req)
			if resp.StatusCode != tc.status {
				t.Errorf("%s with %q: status %d, want %d: %s", path, tc.ct, resp.StatusCode, tc.status, rb)
				continue
			}
			if tc.status != 200 {
				if e := decodeError(t, rb); e.Error.Code == nil || *e.Error.Code != "unsupported_media_type" {
					t.Errorf("%q: error %s", tc.ct, rb)
				}
			}
		}
	}
}

// TestInvalidUTF8: bytes that are not UTF-8 anywhere in the body are a 400
// naming the offset; escaped lone surrogates are valid JSON and accepted
// (decoded as U+FFFD, as Python's json module would not, but harmlessly).
func TestInvalidUTF8(t *testing.T) {
	eng := &fakeEngine{output: "ok", eos: true}
	_, ts := testServer(t, eng, Config{})
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"content", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xffb\"}]}", 400},
		{"truncated sequence", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xe2\x82\"}]}", 400},
		{"overlong encoding", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}", 400},
		{"surrogate bytes", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}", 400},
		{"in a key", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"\xfe\":1}", 400},
		{"in stop", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":\"\xff\"}", 400},
		{"escaped lone surrogate", `{"messages":[{"role":"user","content":"\ud800"}],"max_tokens":2}`, 200},
		{"valid multibyte", `{"messages":[{"role":"user","content":"数学 🤖"}],"max_tokens":2}`, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts.URL+"/v1/chat/completions", tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.status == 400 {
				if e := decodeError(t, b); !strings.Contains(e.Error.Message, "UTF-8") {
					t.Errorf("message %q", e.Error.Message)
				}
			}
		})
	}
}

// endlessEngine commits big blocks until MaxNewTokens, ctx or onBlock
// stops it, and reports how it ended.
type endlessEngine struct {
	ids   []int64
	ended chan error
}

func (e *endlessEngine) Generate(ctx context.Context, prompt []int64, o diffusion.Options, onBlock diffusion.BlockFunc) (*diffusion.Result, error) {
	res := &diffusion.Result{FinishReason: "length"}
	var err error
	for len(res.IDs) < o.MaxNewTokens && err == nil {
		if err = ctx.Err(); err != nil {
			break
		}
		b := e.ids[:min(len(e.ids), o.MaxNewTokens-len(res.IDs))]
		res.IDs = append(res.IDs, b...)
		res.Steps++
		_, err = onBlock(diffusion.Block{IDs: b, Steps: 1})
	}
	select {
	case e.ended <- err:
	default:
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// TestStalledClient: a streaming client that stops reading but keeps its
// connection open is dropped after StallTimeout, so the model is free for
// the next request; without the limit its blocked write would hold the
// model for ever (a blocked write does not see the request context).
func TestStalledClient(t *testing.T) {
	tok := tinyTokenizer(t)
	eng := &endlessEngine{ids: toInt64(tok.Encode(strings.Repeat("lorem ipsum dolor sit amet ", 600))), ended: make(chan error, 1)}
	s := New(Config{ModelName: "m", Logger: discardLogger(), StallTimeout: 200 * time.Millisecond})
	s.SetModel(&Model{Engine: eng, Tokenizer: tok, ContextLength: 1 << 30, VocabSize: 512,
		Defaults: diffusion.Options{BlockSize: 4, Threshold: 0.9, MaxStepsPerBlock: 4, TopP: 1}})
	ts := httptest.NewUnstartedServer(s)
	ts.Listener = smallSendBuffers{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)

	// A small receive buffer, set before connecting so that the window is
	// small from the start, makes the server's writes block sooner.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return nil
	}}
	conn, err := d.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"messages":[{"role":"user","content":"Hi"}],"stream":true,"max_tokens":500000000}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// ... and never read.
	select {
	case err := <-eng.ended:
		if !errors.Is(err, errClientGone) {
			t.Fatalf("generation ended with %v, want the client treated as gone", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stalled client still holds the model after 20 s")
	}
	// The engine reports the end from inside its call, a moment before the
	// handler lets go of the model: until then the server is busy (503).
	resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3}`)
	for deadline := time.Now().Add(2 * time.Second); resp.StatusCode == http.StatusServiceUnavailable &&
		time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		resp, b = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3}`)
	}
	if r := decodeChat(t, resp, b); r.Usage.CompletionTokens != 3 {
		t.Errorf("next request: %s", b)
	}
}

// smallSendBuffers gives accepted connections a small fixed send buffer,
// so that a server write blocks soon after its client stops reading
// (instead of after the several MB that autotuning allows on loopback).
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(8192)
	}
	return c, err
}

// TestKeepAliveAfterDeadline: the write deadline a response leaves on a
// keep-alive connection does not break the next request on it.
func TestKeepAliveAfterDeadline(t *testing.T) {
	eng := &fakeEngine{output: "ok", eos: true}
	_, ts := testServer(t, eng, Config{StallTimeout: 50 * time.Millisecond})
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for i := range 3 {
		if i > 0 {
			time.Sleep(120 * time.Millisecond) // past the previous deadline
		}
		req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"Hi"}],"stream":true}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		resp.Body.Close()
		if s := parseStream(t, buf.Bytes()); !s.done || s.content != "ok" {
			t.Fatalf("request %d: %s", i, buf.Bytes())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPanicLogged: a handler's panic is logged with its stack, answered
// with 500, and the server goes on serving.
func TestPanicLogged(t *testing.T) {
	var logs syncBuffer
	eng := &fakeEngine{output: "fine", eos: true, panicWith: "kaboom"}
	_, ts := testServer(t, eng, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 3 {
		resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
		if resp.StatusCode != 500 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	}
	log := logs.String()
	if strings.Count(log, `msg="panic serving request"`) != 3 || !strings.Contains(log, "panic=kaboom") || !strings.Contains(log, "fakeEngine") {
		t.Errorf("panics not logged with their stacks:\n%s", log)
	}
	eng.panicWith = nil
	resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	decodeChat(t, resp, b)
}

// TestDebugStats: /debug/stats exists only when asked for, and responses
// then carry their queue order.
func TestDebugStats(t *testing.T) {
	eng := &fakeEngine{output: "ok", eos: true}
	_, off := testServer(t, eng, Config{})
	if resp, _ := get(t, off.URL+"/debug/stats"); resp.StatusCode != 404 {
		t.Errorf("/debug/stats without DebugStats: %d", resp.StatusCode)
	}
	_, ts := testServer(t, &fakeEngine{output: "ok", eos: true}, Config{DebugStats: true})
	for i := 1; i <= 2; i++ {
		resp, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
		decodeChat(t, resp, b)
		if q, g := resp.Header.Get("X-Dllm-Queue-Seq"), resp.Header.Get("X-Dllm-Grant-Seq"); q != fmt.Sprint(i) || g != fmt.Sprint(i) {
			t.Errorf("request %d: queue seq %q, grant seq %q", i, q, g)
		}
	}
	resp, b := get(t, ts.URL+"/debug/stats?gc=1")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var st api.DebugStats
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.Goroutines < 1 || st.HeapInuse == 0 || st.NumGC == 0 || st.Requests != 2 || st.Running != 0 {
		t.Errorf("stats %+v", st)
	}
	if runtime.GOOS == "linux" && (st.RSS == 0 || st.RSSPeak < st.RSS || st.OpenFDs < 3) {
		t.Errorf("no RSS or open files on Linux: %+v", st)
	}
}
