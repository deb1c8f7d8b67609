package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"dllm/tokenizer"
)

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	samplingFields
	Messages           json.RawMessage `json:"messages"`
	ChatTemplateKwargs map[string]any  `json:"chat_template_kwargs"`
}

// chatMessage is a message as the chat template receives it.
type chatMessage struct {
	Role             string  `json:"role"`
	Content          string  `json:"content"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

// roles accepted in messages; "developer" is OpenAI's newer name for system.
var roles = map[string]string{"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}

// parseMessages checks the messages and flattens list content to text.
func parseMessages(raw json.RawMessage) ([]chatMessage, *apiError) {
	var items []json.RawMessage
	if s := strings.TrimSpace(string(raw)); s == "" || s == "null" {
		return nil, badRequest("messages", "messages is required")
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("messages", "messages must be an array of message objects")
	}
	if len(items) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	out := make([]chatMessage, len(items))
	for i, item := range items {
		param := fmt.Sprintf("messages[%d]", i)
		var m struct {
			Role             *string         `json:"role"`
			Content          json.RawMessage `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
		}
		if err := json.Unmarshal(item, &m); err != nil {
			return nil, badRequest(param, param+" must be an object with a string role and a content")
		}
		if m.Role == nil {
			return nil, badRequest(param+".role", param+".role is required")
		}
		role, ok := roles[*m.Role]
		if !ok {
			return nil, badRequest(param+".role", fmt.Sprintf("%s.role %q is not one of system, user, assistant, tool", param, *m.Role))
		}
		text, e := contentText(m.Content, param+".content")
		if e != nil {
			return nil, e
		}
		out[i] = chatMessage{Role: role, Content: text, ReasoningContent: m.ReasoningContent}
	}
	return out, nil
}

// contentText reads content given as a string, null, or a list of text
// parts (joined with newlines, as vLLM does for text-only templates).
func contentText(raw json.RawMessage, param string) (string, *apiError) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return "", nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, param+" must be a string or an array of text parts")
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", badRequest(fmt.Sprintf("%s[%d]", param, j), fmt.Sprintf("%s[%d]: only {\"type\": \"text\", \"text\": ...} parts are supported, got type %q", param, j, p.Type))
		}
		texts = append(texts, *p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	m := s.loaded(w)
	if m == nil {
		return
	}
	var req chatRequest
	if e := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); e != nil {
		writeError(w, e)
		return
	}
	msgs, e := parseMessages(req.Messages)
	if e != nil {
		writeError(w, e)
		return
	}
	creq := tokenizer.ChatRequest{AddGenerationPrompt: true, Kwargs: req.ChatTemplateKwargs}
	if v, ok := req.ChatTemplateKwargs["enable_thinking"]; ok && v != nil {
		b, ok := v.(bool)
		if !ok {
			writeError(w, badRequest("chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking must be a boolean"))
			return
		}
		creq.EnableThinking = &b
	}
	creq.Messages, _ = marshal(msgs)
	prompt, err := m.Tokenizer.ApplyChatTemplate(creq)
	if err != nil {
		writeError(w, badRequest("messages", "the chat template rejected the messages: "+err.Error()))
		return
	}
	ids := m.Tokenizer.Encode(prompt)
	opts, stops, e := req.options(m, len(ids), s.cfg.DefaultMaxTokens)
	if e != nil {
		writeError(w, e)
		return
	}
	p := &genParams{prompt: toInt64(ids), opts: opts, stops: stops}
	c := &chatResponder{s: s, w: w, id: "chatcmpl-" + randomID(), created: nowUnix(), split: newSplitter(promptOpensThink(prompt))}
	if req.Stream {
		c.sse = newSSEWriter(w)
		c.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	}
	s.run(w, r, m, p, c)
}

func toInt64(ids []int) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}
