package serve

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestConnectionLimit runs the server with room for 4 connections: idle
// keep-alive connections give way to new ones, connections slow to send
// their headers give way once stale, and while every connection is busy a
// new one still answers /health (and only /health).
func TestConnectionLimit(t *testing.T) {
	addr := startRun(t, Config{MaxConnections: 4})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// get sends a keep-alive GET on c and returns the response.
	send := func(c net.Conn, path string) *http.Response {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	waitFor(t, func() bool { c := dial(); defer c.Close(); return send(c, "/health").StatusCode == 200 })
	time.Sleep(50 * time.Millisecond) // the probes' connections are closed and forgotten

	// 1. Four idle keep-alive connections; a fifth takes the oldest's place.
	var idle []net.Conn
	for range 4 {
		c := dial()
		if resp := send(c, "/v1/models"); resp.StatusCode != 200 {
			t.Fatalf("models: %d", resp.StatusCode)
		}
		idle = append(idle, c)
		time.Sleep(10 * time.Millisecond) // distinct idle times
	}
	if resp := send(dial(), "/v1/models"); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("a new connection with 4 idle ones open: %d (close %v), want 200 on a kept connection", resp.StatusCode, resp.Close)
	}
	idle[0].SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := idle[0].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the longest-idle connection: read %v, want EOF (closed to make room)", err)
	}
	// Many more, each left idle: every one is served in turn.
	for i := range 40 {
		c := dial()
		if resp := send(c, "/v1/models"); resp.StatusCode != 200 {
			t.Fatalf("idle connection %d past the limit: %d", i, resp.StatusCode)
		}
		idle = append(idle, c)
	}
	for _, c := range idle {
		c.Close()
	}
	time.Sleep(50 * time.Millisecond)

	// 2. Four connections that never finish their headers: while they are
	// fresh, a new connection is a spare, good for /health only.
	var slow []net.Conn
	for range 4 {
		c := dial()
		io.WriteString(c, "GET /health HTTP/1.1\r\n")
		slow = append(slow, c)
	}
	time.Sleep(50 * time.Millisecond)
	if resp := send(dial(), "/health"); resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("/health on a full server: %d (close %v), want 200 then close", resp.StatusCode, resp.Close)
	}
	if resp := send(dial(), "/v1/models"); resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("/v1/models on a full server: %d, want 503 with Retry-After", resp.StatusCode)
	}
	// Once they are stale, a new connection takes the place of one.
	time.Sleep(staleNew)
	if resp := send(dial(), "/v1/models"); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("after the slow connections went stale: %d (close %v)", resp.StatusCode, resp.Close)
	}
	closed := 0
	for _, c := range slow {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed != 1 {
		t.Errorf("%d of the slow connections closed, want 1", closed)
	}
	for _, c := range slow {
		c.Close() // or shutdown waits its grace period for them
	}
}

func TestConnectionLimitFitsFileLimit(t *testing.T) {
	cases := []struct {
		want int
		fds  uint64
		got  int
	}{
		{4096, 0, 4096},       // unknown limit
		{4096, 1 << 20, 4096}, // plenty
		{4096, 1024, 1024 - fdReserve},
		{100, 1024, 100},
		{4096, 100, 16}, // a tiny limit still serves a few
	}
	for _, c := range cases {
		var logs syncBuffer
		got := connectionLimit(c.want, c.fds, slog.New(slog.NewTextHandler(&logs, nil)))
		if got != c.got {
			t.Errorf("connectionLimit(%d, %d) = %d, want %d", c.want, c.fds, got, c.got)
		}
		if warned := strings.Contains(logs.String(), "lowered"); warned != (got != c.want) {
			t.Errorf("connectionLimit(%d, %d): warned %v", c.want, c.fds, warned)
		}
	}
	if raiseOpenFileLimit() == 0 {
		t.Error("no open-file limit read on this system")
	}
}

// startRun serves the fake model with Run on a loopback port, as the binary
// does (connection limit and all), and returns the address; the server
// stops when the test ends.
func startRun(t *testing.T, cfg Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	eng := &fakeEngine{tok: tinyTokenizer(t), output: "x"}
	cfg.ModelName, cfg.Logger = "m", discardLogger()
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		ran <- Run(ctx, ln, cfg, func(context.Context) (*Model, error) {
			return &Model{Engine: eng, Tokenizer: eng.tok, ContextLength: 4096, VocabSize: 512}, nil
		})
	}()
	t.Cleanup(func() { stop(); <-ran })
	return ln.Addr().String()
}
