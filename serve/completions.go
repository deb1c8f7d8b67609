package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	samplingFields
	Prompt json.RawMessage `json:"prompt"`
	Echo   bool            `json:"echo"`
	BestOf *int64          `json:"best_of"`
}

// promptIDs reads prompt as a string, a list of one string, token ids, or
// a list of one list of token ids (what eval harnesses send).
func (s *Server) promptIDs(m *Model, raw json.RawMessage) ([]int64, *apiError) {
	if t := strings.TrimSpace(string(raw)); t == "" || t == "null" {
		return nil, badRequest("prompt", "prompt is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return m.encodeText(text), nil
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		if len(texts) != 1 {
			return nil, badRequest("prompt", fmt.Sprintf("prompt must hold exactly one prompt (dllm does not batch), got %d", len(texts)))
		}
		return m.encodeText(texts[0]), nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) != nil {
		var batch [][]int64
		if json.Unmarshal(raw, &batch) != nil {
			return nil, badRequest("prompt", "prompt must be a string, an array of one string, an array of token ids or an array of one array of token ids")
		}
		if len(batch) != 1 {
			return nil, badRequest("prompt", fmt.Sprintf("prompt must hold exactly one prompt (dllm does not batch), got %d", len(batch)))
		}
		ids = batch[0]
	}
	if len(ids) == 0 {
		return nil, badRequest("prompt", "prompt must not be empty")
	}
	for _, id := range ids {
		if id < 0 || id >= int64(m.VocabSize) {
			return nil, badRequest("prompt", fmt.Sprintf("token id %d is outside the vocabulary [0, %d)", id, m.VocabSize))
		}
	}
	return ids, nil
}

// encodeText tokenizes a raw prompt, with BOS first when the tokenizer
// asks for one, as HF's add_special_tokens does.
func (m *Model) encodeText(text string) []int64 {
	ids := toInt64(m.Tokenizer.Encode(text))
	if bos, ok := m.Tokenizer.BOS(); ok && m.Tokenizer.AddBOS() {
		ids = append([]int64{int64(bos)}, ids...)
	}
	return ids
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	m := s.loaded(w)
	if m == nil {
		return
	}
	var req completionRequest
	var p *genParams
	if !s.prepare(w, r, func(body []byte) (e *apiError) {
		p, e = s.completionParams(m, body, &req)
		return e
	}) {
		return
	}
	c := &completionResponder{s: s, w: w, id: "cmpl-" + randomID(), created: nowUnix()}
	if req.Stream {
		c.sse = newSSEWriter(w)
		c.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	}
	s.run(w, r, m, p, c)
}

// completionParams decodes a completion request into req and tokenizes its
// prompt: the work the gate bounds.
func (s *Server) completionParams(m *Model, body []byte, req *completionRequest) (*genParams, *apiError) {
	unknown, e := decodeJSON(body, req)
	if e == nil {
		e = s.checkFields(&req.samplingFields, unknown)
	}
	if e != nil {
		return nil, e
	}
	if req.Echo {
		return nil, badRequest("echo", "echo is not supported")
	}
	if req.BestOf != nil && *req.BestOf != 1 {
		return nil, badRequest("best_of", "best_of must be 1")
	}
	ids, e := s.promptIDs(m, req.Prompt)
	if e != nil {
		return nil, e
	}
	if len(ids) == 0 {
		return nil, badRequest("prompt", "prompt must not be empty")
	}
	opts, stops, e := req.options(m, len(ids), completionMaxTokens)
	if e != nil {
		if e.Param != nil && *e.Param == "messages" {
			e.Param = strPtr("prompt")
		}
		return nil, e
	}
	return &genParams{prompt: ids, opts: opts, stops: stops}, nil
}

// textCompletion is a /v1/completions response or streamed chunk.
type textCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []textChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type textChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// completionResponder presents a generation as a text completion.
type completionResponder struct {
	s            *Server
	w            http.ResponseWriter
	id           string
	created      int64
	sse          *sseWriter
	includeUsage bool
}

func (c *completionResponder) object(choices []textChoice, u *usage) textCompletion {
	return textCompletion{ID: c.id, Object: "text_completion", Created: c.created, Model: c.s.cfg.ModelName, Choices: choices, Usage: u}
}

func (c *completionResponder) begin() error {
	if c.sse == nil {
		return nil
	}
	return c.sse.begin()
}

func (c *completionResponder) text(delta string) error {
	if c.sse == nil {
		return nil // the whole text comes with the outcome
	}
	return c.sse.send(c.object([]textChoice{{Text: delta}}, nil))
}

func (c *completionResponder) end(o *outcome) error {
	if c.sse == nil {
		writeJSON(c.w, http.StatusOK, c.object([]textChoice{{Text: o.text, FinishReason: &o.finish}}, usageOf(o)))
		return nil
	}
	if err := c.sse.send(c.object([]textChoice{{FinishReason: &o.finish}}, nil)); err != nil {
		return err
	}
	if c.includeUsage {
		if err := c.sse.send(c.object([]textChoice{}, usageOf(o))); err != nil {
			return err
		}
	}
	return c.sse.done()
}

func (c *completionResponder) fail(e *apiError) {
	if c.sse != nil && c.sse.started {
		c.sse.sendError(e)
		return
	}
	writeError(c.w, e)
}
