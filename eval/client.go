package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Client talks to one OpenAI-compatible server.
type Client struct {
	// BaseURL is the server's root or its /v1 root
	// ("http://localhost:8000" or "http://localhost:8000/v1").
	BaseURL string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// HTTP is the client used; default a client without a timeout (a
	// request's context bounds it).
	HTTP *http.Client
	// Retries is how many times a request is retried after 429, 503 or a
	// failed connection; default 0 (set by NewClient to 5).
	Retries int
	// Backoff is the first wait between retries, doubled each time up to
	// 30 s; a Retry-After header wins. Default 500 ms.
	Backoff time.Duration
}

// NewClient returns a client for baseURL with 5 retries.
func NewClient(baseURL string) *Client {
	return &Client{BaseURL: baseURL, HTTP: &http.Client{}, Retries: 5, Backoff: 500 * time.Millisecond}
}

// endpoint joins the base URL and a path under /v1.
func (c *Client) endpoint(path string) string {
	base := strings.TrimRight(c.BaseURL, "/")
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	return base + path
}

// ChatRequest is the body of POST /v1/chat/completions that eval sends.
type ChatRequest struct {
	Model              string         `json:"model,omitempty"`
	Messages           []Message      `json:"messages"`
	MaxTokens          int            `json:"max_tokens,omitempty"`
	Temperature        *float64       `json:"temperature,omitempty"`
	Seed               *int64         `json:"seed,omitempty"`
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
	// Extra fields are merged into the body (e.g. dllm's "threshold").
	Extra map[string]any `json:"-"`
}

// Usage is the response's token accounting. DLLM is dllm serve's
// extension: the sampler's forwards and tokens per forward.
type Usage struct {
	PromptTokens     int        `json:"prompt_tokens"`
	CompletionTokens int        `json:"completion_tokens"`
	DLLM             *DLLMUsage `json:"dllm,omitempty"`
}

// DLLMUsage is the "dllm" object of dllm serve's usage.
// Checked and Accepted count, in verify decoding, the drafted tokens
// checked and those kept.
type DLLMUsage struct {
	Steps    int     `json:"steps"`
	TPF      float64 `json:"tpf"`
	Checked  int     `json:"checked"`
	Accepted int     `json:"accepted"`
}

// ChatResponse holds the parts of a chat completion eval reads.
type ChatResponse struct {
	Choices []struct {
		Message struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
}

// StatusError is a non-2xx answer from the server.
type StatusError struct {
	Status  int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("server answered %d: %s", e.Status, e.Message)
}

// retryable says whether an attempt that failed this way may succeed later.
func retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status == http.StatusTooManyRequests || se.Status == http.StatusServiceUnavailable ||
			se.Status == http.StatusBadGateway || se.Status == http.StatusGatewayTimeout
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || isConnRefused(err)
}

func isConnRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection refused")
}

// Chat sends one chat completion, retrying 429/503 and dropped
// connections with exponential backoff (or the server's Retry-After).
func (c *Client) Chat(ctx context.Context, req *ChatRequest) (*ChatResponse, error) {
	body, err := marshalRequest(req)
	if err != nil {
		return nil, err
	}
	var resp ChatResponse
	if err := c.do(ctx, http.MethodPost, c.endpoint("/chat/completions"), body, &resp); err != nil {
		return nil, err
	}
	if len(resp.Choices) == 0 {
		return nil, errors.New("the response has no choices")
	}
	return &resp, nil
}

// Models lists the served model ids (GET /v1/models): the reachability
// check before a run.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	var resp struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := c.do(ctx, http.MethodGet, c.endpoint("/models"), nil, &resp); err != nil {
		return nil, err
	}
	ids := make([]string, len(resp.Data))
	for i, m := range resp.Data {
		ids[i] = m.ID
	}
	return ids, nil
}

func marshalRequest(req *ChatRequest) ([]byte, error) {
	b, err := json.Marshal(req)
	if err != nil || len(req.Extra) == 0 {
		return b, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range req.Extra {
		m[k] = v
	}
	return json.Marshal(m)
}

func (c *Client) do(ctx context.Context, method, url string, body []byte, out any) error {
	wait := c.Backoff
	if wait <= 0 {
		wait = 500 * time.Millisecond
	}
	for attempt := 0; ; attempt++ {
		retryAfter, err := c.once(ctx, method, url, body, out)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !retryable(err) || attempt >= c.Retries {
			if isConnRefused(err) {
				return fmt.Errorf("cannot reach %s (connection refused): is the server running there?", url)
			}
			return fmt.Errorf("%s %s: %w", method, url, err)
		}
		d := wait
		if retryAfter > 0 {
			d = retryAfter
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// once makes one attempt; on a retryable status it also returns the
// server's Retry-After.
func (c *Client) once(ctx context.Context, method, url string, body []byte, out any) (time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode/100 != 2 {
		var after time.Duration
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			after = time.Duration(s) * time.Second
		}
		return after, &StatusError{Status: resp.StatusCode, Message: errorMessage(b)}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return 0, fmt.Errorf("the response is not the JSON expected: %w (%.200q)", err, b)
	}
	return 0, nil
}

// errorMessage is the message of an OpenAI-shaped error body, else the
// body's start.
func errorMessage(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
