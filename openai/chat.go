package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Message is a plain chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatRequest is the body of POST /v1/chat/completions. Messages are
// passed as they are (any shape a server accepts); Extra fields are merged
// into the body (dllm's "threshold", vLLM's "top_k", ...) and win over the
// typed ones.
type ChatRequest struct {
	Model              string            `json:"model,omitempty"`
	Messages           []json.RawMessage `json:"messages"`
	MaxTokens          int               `json:"max_tokens,omitempty"`
	Temperature        *float64          `json:"temperature,omitempty"`
	TopP               *float64          `json:"top_p,omitempty"`
	Seed               *int64            `json:"seed,omitempty"`
	Stream             bool              `json:"stream"`
	StreamOptions      *StreamOptions    `json:"stream_options,omitempty"`
	ChatTemplateKwargs map[string]any    `json:"chat_template_kwargs,omitempty"`
	Extra              map[string]any    `json:"-"`
}

// StreamOptions asks a streamed completion for its usage in a last chunk.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Messages encodes plain messages for ChatRequest.Messages.
func Messages(msgs ...Message) []json.RawMessage {
	out := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		out[i], _ = json.Marshal(m) // two strings always encode
	}
	return out
}

// MarshalJSON merges Extra into the typed fields.
func (r ChatRequest) MarshalJSON() ([]byte, error) {
	type plain ChatRequest
	b, err := json.Marshal(plain(r))
	if err != nil || len(r.Extra) == 0 {
		return b, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range r.Extra {
		m[k] = v
	}
	return json.Marshal(m)
}

// ChatResponse is a chat completion.
type ChatResponse struct {
	ID      string   `json:"id"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   *Usage   `json:"usage"`
}

// Choice is one answer. Servers with a reasoning parser send the reasoning
// apart: reasoning_content (vLLM, SGLang, dllm serve) or reasoning (newer
// vLLM).
type Choice struct {
	Message struct {
		Role             string `json:"role"`
		Content          string `json:"content"`
		ReasoningContent string `json:"reasoning_content"`
		Reasoning        string `json:"reasoning"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

// Usage is the token accounting; DLLM is dllm serve's extension. Raw is
// the object as the server sent it.
type Usage struct {
	PromptTokens     int             `json:"prompt_tokens"`
	CompletionTokens int             `json:"completion_tokens"`
	DLLM             *DLLMUsage      `json:"dllm,omitempty"`
	Raw              json.RawMessage `json:"-"`
}

// UnmarshalJSON keeps the raw object beside the fields.
func (u *Usage) UnmarshalJSON(b []byte) error {
	type plain Usage
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*u = Usage(p)
	u.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// DLLMUsage is dllm serve's usage.dllm: denoising steps, tokens per step
// and, with verify decoding, the drafted tokens checked and those kept.
type DLLMUsage struct {
	Steps    int     `json:"steps"`
	TPF      float64 `json:"tpf"`
	Checked  int     `json:"checked"`
	Accepted int     `json:"accepted"`
}

// Chat sends one chat completion (not streamed) and returns it with the
// attempts it took.
func (c *Client) Chat(ctx context.Context, req *ChatRequest) (*ChatResponse, int, error) {
	r := *req
	r.Stream, r.StreamOptions = false, nil
	var resp ChatResponse
	n, err := c.Do(ctx, http.MethodPost, "/chat/completions", r, &resp)
	if err != nil {
		return nil, n, err
	}
	if len(resp.Choices) == 0 {
		return nil, n, fmt.Errorf("%w: no choices", ErrBadResponse)
	}
	return &resp, n, nil
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID string `json:"id"`
	// MaxNumSeqs is how many requests the server generates for at once,
	// where it says (dllm serve does): the concurrency that fills it.
	// 0 when it does not.
	MaxNumSeqs int `json:"max_num_seqs"`
}

// Models lists the served models (GET /v1/models).
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	var resp struct {
		Data []Model `json:"data"`
	}
	if _, err := c.Do(ctx, http.MethodGet, "/models", nil, &resp); err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// FillConcurrency is the concurrency for a client of models (Models'
// answer): the server's MaxNumSeqs where it says more than def, else def.
func FillConcurrency(models []Model, def int) int {
	if len(models) > 0 && models[0].MaxNumSeqs > def {
		return models[0].MaxNumSeqs
	}
	return def
}

// Chunk is one event of a streamed chat completion.
type Chunk struct {
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage          `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// Stream sends one streamed chat completion and hands each chunk to
// onChunk as it arrives, until "data: [DONE]". It makes one attempt: a
// stream cut short cannot be resumed.
func (c *Client) Stream(ctx context.Context, req *ChatRequest, onChunk func(*Chunk) error) error {
	r := *req
	r.Stream = true
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}
	resp, err := c.send(ctx, http.MethodPost, c.URL("/chat/completions"), b, true)
	if err != nil {
		if Unreachable(err) {
			return fmt.Errorf("cannot reach %s (connection refused): is the server running there?", c.URL("/chat/completions"))
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return statusError(resp, msg)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue // blank separators, comments, event names
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			return nil
		}
		var ch Chunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return fmt.Errorf("%w: a chunk that is not JSON: %v: %.200s", ErrBadResponse, err, data)
		}
		if len(ch.Error) > 0 && string(ch.Error) != "null" {
			return fmt.Errorf("server error in the stream: %s", ErrorMessage([]byte(`{"error":`+string(ch.Error)+`}`)))
		}
		if err := onChunk(&ch); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the stream: %w", err)
	}
	return errors.New("the stream ended without data: [DONE]")
}
