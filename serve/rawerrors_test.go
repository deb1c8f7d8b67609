package serve

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestGoErrorsAsJSON: requests net/http rejects before any handler runs
// are answered in the OpenAI error shape, with net/http's status.
func TestGoErrorsAsJSON(t *testing.T) {
	addr := startRun(t, Config{})
	cases := []struct {
		name, raw string
		status    int
		message   string
	}{
		{"malformed request line", "NONSENSE\r\n\r\n", 400, "400 Bad Request"},
		{"no Host header", "GET /health HTTP/1.1\r\n\r\n", 400, "missing required Host header"},
		{"bad header", "GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400, "400 Bad Request"},
		{"headers too large", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", http.DefaultMaxHeaderBytes+8192) + "\r\n\r\n", 431, "431 Request Header Fields Too Large"},
		{"HTTP version", "GET /health HTTP/2.5\r\nHost: x\r\n\r\n", 505, "unsupported protocol version"},
		{"transfer coding", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "Unsupported transfer encoding"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			go io.WriteString(conn, c.raw) // the server may answer before it has read it all
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			e := decodeError(t, b)
			if !strings.Contains(e.Error.Message, c.message) || e.Error.Code == nil {
				t.Errorf("body %s: want a message with %q and a code", b, c.message)
			}
			if !json.Valid(b) {
				t.Errorf("not JSON: %s", b)
			}
		})
	}
}
