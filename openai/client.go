// Package openai is dllm's one client of OpenAI-compatible servers (dllm
// serve, vLLM, SGLang): dllm eval, data distill and bench decode --server
// talk through it, and serve/loadgen builds and reads its requests with its
// types. It retries what may pass later (connection errors, timeouts, 408,
// 429, 5xx) with jittered exponential backoff, honouring Retry-After, and
// turns error bodies into their message.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client talks to one OpenAI-compatible server.
type Client struct {
	// Base is the server's /v1 root, as New normalises it
	// ("http://localhost:8000/v1").
	Base string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// HTTP is the client used (New: one without a timeout; AttemptTimeout
	// and the context bound a request).
	HTTP *http.Client
	// Retries bounds the retries of one request after a failure that may
	// pass (New: 5; 0: none).
	Retries int
	// Backoff is the first wait between attempts, doubled each time with
	// ±25% jitter up to MaxBackoff (New: 500 ms and 30 s). A Retry-After
	// header wins, up to 10 minutes.
	Backoff, MaxBackoff time.Duration
	// AttemptTimeout bounds one attempt; 0: only the context does.
	AttemptTimeout time.Duration
}

// New returns a client for a server given as its root
// ("http://localhost:8000"), its /v1 root, or its full
// /v1/chat/completions URL, with 5 retries.
func New(server string) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(server))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q: want an http(s) URL such as http://localhost:8000", server)
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		p = strings.TrimSuffix(p, "/chat/completions")
	case strings.HasSuffix(p, "/v1"):
	default:
		p += "/v1"
	}
	u.Path, u.RawQuery, u.Fragment = p, "", ""
	return &Client{Base: u.String(), HTTP: &http.Client{}, Retries: 5, Backoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second}, nil
}

// URL is the address of path under the /v1 root ("/chat/completions").
func (c *Client) URL(path string) string { return c.Base + path }

// StatusError is a non-2xx answer.
type StatusError struct {
	Status  int
	Message string
	// RetryAfter is the answer's Retry-After (0: none).
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("server answered %d: %s", e.Status, e.Message)
}

// ErrBadResponse marks a 2xx answer that is not the JSON expected.
var ErrBadResponse = errors.New("the response is not the JSON expected")

// Retryable says whether a request that failed with err may pass later: a
// connection or transport error, or a 408, 429 or 5xx answer.
func Retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status == http.StatusRequestTimeout || se.Status == http.StatusTooManyRequests || se.Status >= 500
	}
	return err != nil && !errors.Is(err, ErrBadResponse) && !errors.Is(err, context.Canceled)
}

// Unreachable says whether err is the server not listening at all.
func Unreachable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection refused")
}

// Do sends one request to path (body: nil, raw JSON bytes, or a value
// to marshal) and decodes a 2xx answer into out (unless nil), retrying
// what may pass. It returns the attempts made. A server that refuses the
// connection on the last attempt gives an error that says so.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) (attempts int, err error) {
	var b []byte
	switch v := body.(type) {
	case nil:
	case []byte:
		b = v
	default:
		if b, err = json.Marshal(v); err != nil {
			return 0, fmt.Errorf("encoding the request: %w", err)
		}
	}
	wait := c.Backoff
	if wait <= 0 {
		wait = 500 * time.Millisecond
	}
	maxWait := c.MaxBackoff
	if maxWait <= 0 {
		maxWait = 30 * time.Second
	}
	u := c.URL(path)
	for attempts = 1; ; attempts++ {
		err = c.once(ctx, method, u, b, out)
		if err == nil {
			return attempts, nil
		}
		if ctx.Err() != nil {
			return attempts, ctx.Err()
		}
		if !Retryable(err) || attempts > c.Retries {
			if Unreachable(err) {
				return attempts, fmt.Errorf("cannot reach %s (connection refused): is the server running there?", u)
			}
			return attempts, err
		}
		d := time.Duration(float64(wait) * (0.75 + 0.5*rand.Float64()))
		var se *StatusError
		if errors.As(err, &se) && se.RetryAfter > 0 {
			d = min(se.RetryAfter, 10*time.Minute)
		}
		select {
		case <-ctx.Done():
			return attempts, ctx.Err()
		case <-time.After(d):
		}
		wait = min(2*wait, maxWait)
	}
}

// once makes one attempt.
func (c *Client) once(ctx context.Context, method, u string, body []byte, out any) error {
	if c.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.AttemptTimeout)
		defer cancel()
	}
	resp, err := c.send(ctx, method, u, body, false)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return statusError(resp, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: %v (%.200q)", ErrBadResponse, err, b)
	}
	return nil
}

// send makes the HTTP request.
func (c *Client) send(ctx context.Context, method, u string, body []byte, stream bool) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

// statusError reads a non-2xx answer.
func statusError(resp *http.Response, body []byte) *StatusError {
	e := &StatusError{Status: resp.StatusCode, Message: ErrorMessage(body)}
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// ErrorMessage is the message of an error body: OpenAI's {"error":
// {"message"}}, {"error": "..."}, FastAPI's {"detail": ...}, else the
// body's start.
func ErrorMessage(b []byte) string {
	var e struct {
		Error  json.RawMessage `json:"error"`
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &e) == nil {
		var obj struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(e.Error, &obj) == nil && obj.Message != "":
			return obj.Message
		case json.Unmarshal(e.Error, &s) == nil && s != "":
			return s
		case len(e.Detail) > 0:
			return string(e.Detail)
		}
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}
