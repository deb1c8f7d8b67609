package serve

import (
	"crypto/rand"
	"encoding/hex"
	"math"
	"net/http"
	"strings"
	"time"
)

// usage counts tokens as OpenAI does; reasoning is part of completion_tokens.
// DLLM is dllm's extension (clients ignore unknown fields): how many model
// forwards the generation took, the figure behind diffusion's speed-up.
type usage struct {
	PromptTokens     int        `json:"prompt_tokens"`
	CompletionTokens int        `json:"completion_tokens"`
	TotalTokens      int        `json:"total_tokens"`
	DLLM             *dllmUsage `json:"dllm,omitempty"`
}

// dllmUsage is usage.dllm: steps are the forwards after the prefill
// (denoising steps and commits, docs/sampler.md), tpf = completion tokens /
// steps.
// With verify, checked and accepted count the drafted tokens checked
// against the model's AR prediction and those it kept.
type dllmUsage struct {
	Steps    int     `json:"steps"`
	TPF      float64 `json:"tpf"`
	Checked  int     `json:"checked,omitempty"`
	Accepted int     `json:"accepted,omitempty"`
}

func usageOf(o *outcome) *usage {
	u := &usage{PromptTokens: o.promptTokens, CompletionTokens: o.completionTokens, TotalTokens: o.promptTokens + o.completionTokens}
	if o.steps > 0 {
		u.DLLM = &dllmUsage{Steps: o.steps, TPF: math.Round(100*float64(o.completionTokens)/float64(o.steps)) / 100,
			Checked: o.checked, Accepted: o.accepted}
	}
	return u
}

// chatCompletion is a whole (non-streamed) chat response.
type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage"`
}

type chatChoice struct {
	Index        int        `json:"index"`
	Message      chatOutput `json:"message"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason string     `json:"finish_reason"`
}

// chatOutput is the assistant's message. The reasoning is sent both as
// reasoning_content (vLLM, DeepSeek) and reasoning (vLLM's newer name).
type chatOutput struct {
	Role             string  `json:"role"`
	Content          string  `json:"content"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
	Reasoning        *string `json:"reasoning,omitempty"`
}

// chatChunk is one streamed event.
type chatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatDelta struct {
	Role             string  `json:"role,omitempty"`
	Content          *string `json:"content,omitempty"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
	Reasoning        *string `json:"reasoning,omitempty"`
}

// chatResponder presents a generation as a chat completion, whole or
// streamed; reasoning and content are split by the same splitter either way.
type chatResponder struct {
	s            *Server
	w            http.ResponseWriter
	id           string
	created      int64
	split        *splitter
	sse          *sseWriter // nil: not streaming
	includeUsage bool
	reasoning    strings.Builder
	content      strings.Builder
}

func (c *chatResponder) chunk(d chatDelta, finish *string) chatChunk {
	return chatChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.s.cfg.ModelName,
		Choices: []chunkChoice{{Delta: d, FinishReason: finish}}}
}

func (c *chatResponder) begin() error {
	if c.sse == nil {
		return nil
	}
	if err := c.sse.begin(); err != nil {
		return err
	}
	return c.sse.send(c.chunk(chatDelta{Role: "assistant", Content: strPtr("")}, nil))
}

func (c *chatResponder) text(delta string) error {
	return c.deliver(c.split.write(delta, false))
}

func (c *chatResponder) deliver(reasoning, content string) error {
	c.reasoning.WriteString(reasoning)
	c.content.WriteString(content)
	if c.sse == nil || reasoning == "" && content == "" {
		return nil
	}
	var d chatDelta
	if reasoning != "" {
		d.ReasoningContent, d.Reasoning = &reasoning, &reasoning
	}
	if content != "" {
		d.Content = &content
	}
	return c.sse.send(c.chunk(d, nil))
}

func (c *chatResponder) end(o *outcome) error {
	if err := c.deliver(c.split.write("", true)); err != nil {
		return err
	}
	if c.sse == nil {
		out := chatOutput{Role: "assistant", Content: c.content.String()}
		if r := c.reasoning.String(); r != "" {
			out.ReasoningContent, out.Reasoning = &r, &r
		}
		writeJSON(c.w, http.StatusOK, chatCompletion{
			ID: c.id, Object: "chat.completion", Created: c.created, Model: c.s.cfg.ModelName,
			Choices: []chatChoice{{Message: out, FinishReason: o.finish}}, Usage: usageOf(o),
		})
		return nil
	}
	if err := c.sse.send(c.chunk(chatDelta{}, &o.finish)); err != nil {
		return err
	}
	if c.includeUsage {
		u := c.chunk(chatDelta{}, nil)
		u.Choices, u.Usage = []chunkChoice{}, usageOf(o)
		if err := c.sse.send(u); err != nil {
			return err
		}
	}
	return c.sse.done()
}

func (c *chatResponder) fail(e *apiError) {
	if c.sse != nil && c.sse.started {
		c.sse.sendError(e)
		return
	}
	writeError(c.w, e)
}

// randomID is a response id suffix, unique enough to tell requests apart.
func randomID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func nowUnix() int64 { return time.Now().Unix() }
