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

// parseMessages checks the messages (at most max of them) and flattens
// list content to text.
func parseMessages(raw json.RawMessage, max int) ([]chatMessage, *apiError) {
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
	if len(items) > max {
		return nil, badRequest("messages", fmt.Sprintf("at most %d messages are allowed in one request (the server's --max-messages), got %d", max, len(items)))
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
			return nil, badRequest(param+".role", fmt.Sprintf("%s.role %q is not one of system, developer, user, assistant, tool", param, *m.Role))
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
	var p *genParams
	var prompt string
	if !s.prepare(w, r, func(body []byte) (e *apiError) {
		p, prompt, e = s.chatParams(m, body, &req)
		return e
	}) {
		return
	}
	c := &chatResponder{s: s, w: w, id: "chatcmpl-" + randomID(), created: nowUnix(), split: newSplitter(promptOpensThink(prompt))}
	if req.Stream {
		c.sse = newSSEWriter(w)
		c.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	}
	s.run(w, r, m, p, c)
}

// chatParams decodes a chat request into req and renders and tokenizes its
// prompt: the work the gate bounds.
func (s *Server) chatParams(m *Model, body []byte, req *chatRequest) (*genParams, string, *apiError) {
	unknown, e := decodeJSON(body, req)
	if e == nil {
		e = s.checkFields(&req.samplingFields, unknown)
	}
	if e != nil {
		return nil, "", e
	}
	msgs, e := parseMessages(req.Messages, s.cfg.MaxMessages)
	if e != nil {
		return nil, "", e
	}
	creq := tokenizer.ChatRequest{AddGenerationPrompt: true, Kwargs: req.ChatTemplateKwargs}
	if v, ok := req.ChatTemplateKwargs["enable_thinking"]; ok && v != nil {
		b, ok := v.(bool)
		if !ok {
			return nil, "", badRequest("chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking must be a boolean")
		}
		creq.EnableThinking = &b
	}
	creq.Messages, _ = marshal(msgs)
	prompt, err := m.Tokenizer.ApplyChatTemplate(creq)
	if err != nil {
		return nil, "", badRequest("messages", "the chat template rejected the messages: "+err.Error())
	}
	ids := m.Tokenizer.Encode(prompt)
	opts, stops, e := req.options(m, len(ids), s.cfg.DefaultMaxTokens)
	if e != nil {
		return nil, "", e
	}
	return &genParams{prompt: toInt64(ids), opts: opts, stops: stops}, prompt, nil
}

func toInt64(ids []int) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}
