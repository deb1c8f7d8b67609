package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestNew(t *testing.T) {
	for _, c := range []struct{ in, base, err string }{
		{in: "http://localhost:8000", base: "http://localhost:8000/v1"},
		{in: "http://h:1/v1/", base: "http://h:1/v1"},
		{in: "https://h/api/v1/chat/completions", base: "https://h/api/v1"},
		{in: " http://h:1?x=1 ", base: "http://h:1/v1"},
		{in: "localhost:8000", err: "want an http(s) URL"},
		{in: "ftp://h", err: "want an http(s) URL"},
	} {
		cl, err := New(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || cl.Base != c.base || cl.URL("/models") != c.base+"/models" {
			t.Errorf("%q: %+v, %v; want base %s", c.in, cl, err, c.base)
		}
	}
}

// A request retries 429/5xx and honours Retry-After, not a 400; Extra
// fields win over typed ones; usage keeps its raw object.
func TestChatRetries(t *testing.T) {
	var calls atomic.Int32
	var body map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, `{"error":{"message":"no key"}}`, http.StatusUnauthorized)
			return
		}
		switch n {
		case 1:
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"busy"}}`, http.StatusTooManyRequests)
		case 2:
			http.Error(w, `{"detail":"gateway"}`, http.StatusBadGateway)
		default:
			json.NewDecoder(r.Body).Decode(&body)
			fmt.Fprint(w, `{"choices":[{"message":{"content":"hi","reasoning_content":"r"},"finish_reason":"stop"}],"usage":{"completion_tokens":3,"dllm":{"steps":1,"tpf":3},"x":1}}`)
		}
	}))
	defer srv.Close()
	cl, _ := New(srv.URL)
	cl.APIKey, cl.Backoff = "k", time.Millisecond
	temp := 0.5
	resp, attempts, err := cl.Chat(context.Background(), &ChatRequest{Model: "m", Messages: Messages(Message{Role: "user", Content: "q"}),
		Temperature: &temp, Extra: map[string]any{"temperature": 0.7, "threshold": 0.9}})
	if err != nil || attempts != 3 {
		t.Fatalf("%v after %d attempts", err, attempts)
	}
	c := resp.Choices[0]
	if c.Message.Content != "hi" || c.Message.ReasoningContent != "r" || c.FinishReason != "stop" || resp.Usage.CompletionTokens != 3 ||
		resp.Usage.DLLM.TPF != 3 || !strings.Contains(string(resp.Usage.Raw), `"x":1`) {
		t.Errorf("response %+v usage %+v", resp, resp.Usage)
	}
	if body["temperature"] != 0.7 || body["threshold"] != 0.9 || body["stream"] != false || body["model"] != "m" {
		t.Errorf("request body %v", body)
	}
	// A 400 is not retried; its message is the server's.
	calls.Store(0)
	cl.APIKey = ""
	_, attempts, err = cl.Chat(context.Background(), &ChatRequest{})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 401 || se.Message != "no key" || attempts != 1 {
		t.Errorf("401: %v after %d attempts", err, attempts)
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cl, _ := New("http://" + addr)
	cl.Retries, cl.Backoff = 1, time.Millisecond
	if _, err := cl.Models(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("models: %v", err)
	}
	if err := cl.Stream(context.Background(), &ChatRequest{}, func(*Chunk) error { return nil }); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("stream: %v", err)
	}
}

func TestStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		json.NewDecoder(r.Body).Decode(&b)
		if b["stream"] != true || r.Header.Get("Accept") != "text/event-stream" {
			http.Error(w, "not streamed", 400)
			return
		}
		fmt.Fprint(w, ": comment\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	cl, _ := New(srv.URL)
	var text, finish string
	tokens := 0
	err := cl.Stream(context.Background(), &ChatRequest{}, func(ch *Chunk) error {
		for _, c := range ch.Choices {
			text += c.Delta.Content
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		if ch.Usage != nil {
			tokens = ch.Usage.CompletionTokens
		}
		return nil
	})
	if err != nil || text != "a" || finish != "stop" || tokens != 1 {
		t.Errorf("%v: %q %q %d", err, text, finish, tokens)
	}
}

func TestErrorMessage(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"error":{"message":"bad field","type":"x"}}`, "bad field"},
		{`{"error":"plain"}`, "plain"},
		{`{"detail":"not found"}`, `"not found"`},
		{"", "(empty body)"},
		{"<html>oops</html>", "<html>oops</html>"},
	} {
		if got := ErrorMessage([]byte(c.body)); got != c.want {
			t.Errorf("%q: %q, want %q", c.body, got, c.want)
		}
	}
}

// Models reads max_num_seqs where a server says it, and FillConcurrency
// takes it over the default only when it is more.
func TestModelsFillConcurrency(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model","max_num_seqs":32}]}`))
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	models, err := c.Models(context.Background())
	if err != nil || len(models) != 1 || models[0] != (Model{ID: "m", MaxNumSeqs: 32}) {
		t.Fatalf("models %+v, %v", models, err)
	}
	for _, tc := range []struct {
		models    []Model
		def, want int
	}{
		{models, 4, 32}, {models, 64, 64}, {[]Model{{ID: "vllm"}}, 8, 8}, {nil, 8, 8},
	} {
		if got := FillConcurrency(tc.models, tc.def); got != tc.want {
			t.Errorf("FillConcurrency(%+v, %d) = %d, want %d", tc.models, tc.def, got, tc.want)
		}
	}
}
