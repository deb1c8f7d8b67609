package data

import (
	"errors"
	"strings"

	"dllm/tokenizer"
)

// doc is one tokenized document, separator included.
type doc struct {
	tokens []uint32
	loss   []bool // per token; nil means every token is a target
}

// Reasons a record yields no document, as counted in the manifest.
const (
	skipNoField     = "no_field"     // a JSON record without the field
	skipEmpty       = "empty"        // null or blank field
	skipTooLong     = "too_long"     // longer than max_doc_tokens
	skipNoAssistant = "no_assistant" // chat without an assistant turn
	skipChatError   = "chat_error"   // messages the template could not render
)

// item is what one record became: its documents, or why there are none.
type item struct {
	ord   int64 // the record's position in its source's stream
	epoch int
	docs  []doc
	skips map[string]int
	chat  chatStats
	err   string   // the chat error, for the log
	keys  []string // a record without the field: the keys it has
}

// encoder tokenizes records; it is shared by all workers (the tokenizer is
// safe for concurrent use).
type encoder struct {
	tok  *tokenizer.Tokenizer
	sep  uint32
	bos  int // -1: none
	chat *chatRenderer
}

// encode tokenizes one record of a source.
func (e *encoder) encode(src *SourceConfig, r rawRecord) item {
	var it item
	if r.fields != nil {
		it.skip(skipNoField)
		it.keys = r.fields
		return it
	}
	if r.null || strings.TrimSpace(r.value) == "" {
		it.skip(skipEmpty)
		return it
	}
	if src.Kind == KindText {
		ids := make([]int, 0, len(r.value)/3+2)
		if e.bos >= 0 {
			ids = append(ids, e.bos)
		}
		ids = e.tok.AppendEncode(ids, r.value)
		toks := make([]uint32, len(ids), len(ids)+1)
		for i, id := range ids {
			toks[i] = uint32(id)
		}
		// Text ends where the document ends: the separator is a target.
		it.add(src, doc{tokens: append(toks, e.sep)})
		return it
	}
	docs, st, err := e.chat.renderChat(r.value)
	it.chat = st
	if err != nil {
		if errors.Is(err, errNoAssistant) {
			it.skip(skipNoAssistant)
		} else {
			it.skip(skipChatError)
			it.err = err.Error()
		}
		return it
	}
	var ids []int
	for _, segs := range docs {
		var d doc
		for _, s := range segs {
			if s.text == "" {
				continue
			}
			ids = e.tok.AppendEncode(ids[:0], s.text)
			for _, id := range ids {
				d.tokens = append(d.tokens, uint32(id))
				d.loss = append(d.loss, s.on)
			}
		}
		// The assistant already learns to stop on its end-of-turn token;
		// the separator after the scaffolding is not a target.
		d.tokens = append(d.tokens, e.sep)
		d.loss = append(d.loss, false)
		it.add(src, d)
	}
	return it
}

func (it *item) add(src *SourceConfig, d doc) {
	if src.MaxDocTokens > 0 && len(d.tokens) > src.MaxDocTokens {
		it.skip(skipTooLong)
		return
	}
	it.docs = append(it.docs, d)
}

func (it *item) skip(reason string) {
	if it.skips == nil {
		it.skips = map[string]int{}
	}
	it.skips[reason]++
}
