package serve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRun: the server answers 503 while loading and 200 after; stopping
// it cancels a generation still running after the grace period, which is
// told why, and Run returns nil.
func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := URL(ln.Addr())
	release := make(chan struct{})
	eng := &fakeEngine{tok: tinyTokenizer(t), output: "abc", gate: make(chan struct{}), started: make(chan struct{}, 1)}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		ran <- Run(ctx, ln, Config{ModelName: "m", Logger: discardLogger(), ShutdownGrace: 50 * time.Millisecond},
			func(context.Context) (*Model, error) {
				<-release
				return &Model{Engine: eng, Tokenizer: eng.tok, ContextLength: 4096, VocabSize: 512}, nil
			})
	}()
	if resp, _ := get(t, url+"/health"); resp.StatusCode != 503 {
		t.Fatalf("health while loading: %d", resp.StatusCode)
	}
	close(release)
	waitFor(t, func() bool { resp, _ := get(t, url+"/health"); return resp.StatusCode == 200 })

	body := make(chan string, 1)
	go func() {
		_, b := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"stream":true}`)
		body <- string(b)
	}()
	<-eng.started
	stop()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if b := <-body; !strings.Contains(b, "shutting down") || !strings.HasSuffix(b, "data: [DONE]\n\n") {
		t.Errorf("stream cut by shutdown: %s", b)
	}
	if _, err := http.Get(url + "/health"); err == nil {
		t.Error("still accepting connections")
	}
}

func TestRunLoadError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bad := errors.New("corrupt weights")
	err = Run(context.Background(), ln, Config{Logger: discardLogger()}, func(context.Context) (*Model, error) { return nil, bad })
	if !errors.Is(err, bad) {
		t.Fatalf("Run: %v", err)
	}
}

func TestURL(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:8000":   "http://localhost:8000",
		"[::]:8000":      "http://localhost:8000",
		"127.0.0.1:9":    "http://127.0.0.1:9",
		"10.1.2.3:80":    "http://10.1.2.3:80",
		"[fe80::1]:8000": "http://[fe80::1]:8000",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := URL(a); got != want {
			t.Errorf("URL(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestRunWarnsWithoutKey: a server without an API key on an address other
// machines can reach says so in its start-up log.
func TestRunWarnsWithoutKey(t *testing.T) {
	cases := []struct {
		host, key string
		warn      bool
	}{
		{"0.0.0.0", "", true},
		{"0.0.0.0", "k", false},
		{"127.0.0.1", "", false},
		{"::1", "", false},
	}
	for _, c := range cases {
		t.Run(c.host+"/"+c.key, func(t *testing.T) {
			ln, err := net.Listen("tcp", net.JoinHostPort(c.host, "0"))
			if err != nil {
				t.Skip(err)
			}
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			Run(context.Background(), ln, Config{Logger: log, APIKey: c.key}, func(context.Context) (*Model, error) { return nil, errors.New("stop") })
			if got := strings.Contains(logs.String(), "no API key"); got != c.warn {
				t.Errorf("warned %v, want %v:\n%s", got, c.warn, logs.String())
			}
		})
	}
}
