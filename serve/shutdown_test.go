package serve

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// streamClient reads a chat stream in the background.
type streamClient struct {
	firstText chan struct{} // closed at the first text chunk
	done      chan string   // the whole body once the stream ends
}

func startStream(t *testing.T, url, body string) *streamClient {
	t.Helper()
	c := &streamClient{firstText: make(chan struct{}), done: make(chan string, 1)}
	go func() {
		var all strings.Builder
		defer func() { c.done <- all.String() }()
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			all.WriteString("transport error: " + err.Error())
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		seen := false
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if !seen && strings.Contains(sc.Text(), `"content":"`) && !strings.Contains(sc.Text(), `"content":""`) {
				seen = true
				close(c.firstText)
			}
		}
	}()
	return c
}

// TestSIGTERMDrains starts the real server, sends it SIGTERM with a
// generation running and one queued behind it, and checks both ways a
// drain can go: requests that end within the grace period
// (--shutdown-grace) are answered in full; one still running after it is
// cancelled with an error event, and the one queued behind it gets 503. Either way new connections
// are refused at once and the process exits with status 0.
func TestSIGTERMDrains(t *testing.T) {
	bin := needBinary(t)
	model := tinyModelDir(t, bin)
	for _, tc := range []struct {
		name      string
		maxTokens int    // of the running stream
		grace     string // --shutdown-grace
		finishes  bool   // within the grace period
	}{
		{"finishes", 200, "15s", true}, // about a second on an idle CPU
		// 2000 tokens of the tiny model take far more than a second on a
		// CPU (attention over a growing context).
		{"cancels", 2000, "1s", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, bin, model, "--max-queue", "4", "--shutdown-grace", tc.grace)
			stream := startStream(t, srv.url, `{"messages":[{"role":"user","content":"Hi"}],"stream":true,"temperature":0,"max_tokens":`+strconv.Itoa(tc.maxTokens)+`}`)
			select {
			case <-stream.firstText:
			case body := <-stream.done:
				t.Fatalf("stream ended before any text: %s", body)
			case <-time.After(30 * time.Second):
				t.Fatal("no text after 30 s")
			}
			queued := make(chan *http.Response, 1)
			go func() {
				resp, err := http.Post(srv.url+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8}`))
				if err != nil {
					t.Errorf("queued request: %v", err)
					resp = nil
				}
				queued <- resp
			}()
			waitFor(t, func() bool { _, b := get(t, srv.url+"/health"); return strings.Contains(string(b), `"waiting":1`) })

			exited := make(chan struct{})
			var exitErr error
			var took time.Duration
			go func() {
				defer close(exited)
				exitErr, took = srv.stop(t, 30*time.Second)
			}()
			// The listener closes at once: new connections are refused
			// while the requests in flight drain.
			waitFor(t, func() bool {
				resp, err := http.Get(srv.url + "/health")
				if err == nil {
					resp.Body.Close()
				}
				return err != nil
			})

			body := <-stream.done
			resp := <-queued
			<-exited
			if exitErr != nil {
				t.Fatalf("exit after SIGTERM: %v\n%s", exitErr, srv.log())
			}
			if !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
				t.Errorf("stream does not end with [DONE]:\n%s", tail(body))
			}
			if resp == nil {
				return
			}
			defer resp.Body.Close()
			if tc.finishes {
				if !strings.Contains(body, `"finish_reason":"length"`) || strings.Contains(body, `"error"`) {
					t.Errorf("stream not finished in full:\n%s", tail(body))
				}
				if resp.StatusCode != 200 {
					t.Errorf("queued request: status %d, want 200 (drained)", resp.StatusCode)
				}
				if took > 14*time.Second {
					t.Errorf("exit took %v: the grace period was waited out, although the requests ended", took)
				}
			} else {
				if !strings.Contains(body, `"shutting_down"`) {
					t.Errorf("stream not ended by a shutting_down error event:\n%s", tail(body))
				}
				if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
					t.Errorf("queued request: status %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
				}
				if took < time.Second || took > 15*time.Second {
					t.Errorf("exit after %v; want the 1 s grace period, then prompt cancellation", took)
				}
			}
			if !strings.Contains(srv.log(), "msg=stopped") {
				t.Errorf("no msg=stopped in the log:\n%s", srv.log())
			}
			t.Logf("SIGTERM to exit 0: %v", took.Round(10*time.Millisecond))
		})
	}
}

// tail is the end of a long body, for messages.
func tail(s string) string {
	if len(s) > 1500 {
		return "..." + s[len(s)-1500:]
	}
	return s
}
