package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"dllm/tokenizer"
)

// segment is a stretch of rendered chat text with one loss value.
type segment struct {
	text string
	on   bool
}

// chatStats counts what happened to a conversation's assistant turns.
type chatStats struct {
	turns    int // assistant turns with loss ON somewhere
	split    int // turns trained in a document of their own (see SplitTurns)
	unmasked int // turns left as loss-OFF context
}

// chatRenderer renders conversations through the model's chat template and
// finds the text each assistant turn adds.
//
// The mask is derived by rendering prefixes: the assistant turn i spans
// from the end of render(messages[:i], add_generation_prompt) to the end
// of render(messages[:i+1]), and is loss ON up to and including the last
// end-of-turn token in that span (what the model generates and stops on);
// the newline a template writes after <|im_end|> stays OFF. A turn counts
// only where both renderings are prefixes of the whole conversation's, so
// a template that renders history differently (Qwen3 drops earlier turns'
// reasoning) never gets a mask misaligned with the text.
//
// Each segment is tokenized on its own. The boundaries sit after the
// generation prompt and after the end-of-turn token, which is where
// inference separates the prompt's tokenization from the generated tokens,
// so the training tokens are those the model sees and produces.
type chatRenderer struct {
	tok      *tokenizer.Tokenizer
	thinking *bool
	eot      string
	split    bool
}

// renderChat turns one conversation (a JSON array of messages) into
// documents of segments.
func (r *chatRenderer) renderChat(messagesJSON string) ([][]segment, chatStats, error) {
	var st chatStats
	var msgs []json.RawMessage
	if err := json.Unmarshal([]byte(messagesJSON), &msgs); err != nil {
		return nil, st, fmt.Errorf("messages: %w", err)
	}
	last := -1
	roles := make([]string, len(msgs))
	for i, m := range msgs {
		var head struct {
			Role string `json:"role"`
		}
		if err := json.Unmarshal(m, &head); err != nil {
			return nil, st, fmt.Errorf("messages[%d]: %w", i, err)
		}
		if head.Role == "" {
			return nil, st, fmt.Errorf("messages[%d]: no role", i)
		}
		roles[i] = head.Role
		if head.Role == "assistant" {
			last = i
		}
	}
	if last < 0 {
		return nil, st, errNoAssistant
	}
	// Messages after the last assistant turn train nothing.
	msgs = msgs[:last+1]
	render := func(n int, gen bool) (string, error) {
		var b bytes.Buffer
		b.WriteByte('[')
		for i, m := range msgs[:n] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(m)
		}
		b.WriteByte(']')
		return r.tok.ApplyChatTemplate(tokenizer.ChatRequest{Messages: b.Bytes(), AddGenerationPrompt: gen, EnableThinking: r.thinking})
	}
	full, err := render(len(msgs), false)
	if err != nil {
		return nil, st, err
	}
	var main []segment
	var extra [][]segment
	pos := 0 // end of the text already assigned to segments of main
	for i, role := range roles[:len(msgs)] {
		if role != "assistant" {
			continue
		}
		if i == 0 {
			// No prompt renders before a leading assistant message.
			st.unmasked++
			continue
		}
		prompt, err := render(i, true)
		if err != nil {
			return nil, st, err
		}
		turn, err := render(i+1, false)
		if err != nil {
			return nil, st, err
		}
		if !strings.HasPrefix(turn, prompt) {
			return nil, st, fmt.Errorf("messages[%d]: the template's generation prompt is not a prefix of the rendered turn; cannot find the assistant's tokens", i)
		}
		onEnd := len(prompt) + r.onLength(turn[len(prompt):])
		if len(prompt) >= pos && strings.HasPrefix(full, turn) {
			main = append(main, segment{full[pos:len(prompt)], false}, segment{full[len(prompt):onEnd], true})
			pos = onEnd
			st.turns++
			continue
		}
		if !r.split {
			st.unmasked++
			continue
		}
		extra = append(extra, []segment{{turn[:len(prompt)], false}, {turn[len(prompt):onEnd], true}, {turn[onEnd:], false}})
		st.turns++
		st.split++
	}
	var docs [][]segment
	if pos > 0 {
		docs = append(docs, append(main, segment{full[pos:], false}))
	}
	docs = append(docs, extra...)
	if len(docs) == 0 {
		return nil, st, errNoAssistant
	}
	return docs, st, nil
}

// errNoAssistant marks conversations without a trainable assistant turn.
var errNoAssistant = errors.New("no assistant turn to train on")

// onLength is how much of an assistant turn's rendering is loss ON: up
// to the end of its last end-of-turn token, or all of it when there is
// none (a template that closes turns differently).
func (r *chatRenderer) onLength(turn string) int {
	if r.eot != "" {
		if k := strings.LastIndex(turn, r.eot); k >= 0 {
			return k + len(r.eot)
		}
	}
	return len(turn)
}
