package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Tokenizer encodes text to token ids and back, and renders chat
// templates. It is immutable after loading and safe for concurrent use.
type Tokenizer struct {
	model     *bpe
	normalize normalizer
	pre       preTokenizer
	decoder   decoder

	added     []AddedToken // by id
	addedByID map[int]*AddedToken
	rawAdded  *addedMatcher // matched on the input as given
	normAdded *addedMatcher // matched after normalization
	idToToken []string

	cfg  tokenizerConfig
	chat *chatTemplates
}

// Parse builds a Tokenizer from the contents of tokenizer.json and,
// optionally, tokenizer_config.json (nil for none) and a chat template
// (empty to use tokenizer_config.json's, if any).
func Parse(tokenizerJSON, configJSON []byte, chatTemplate string) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: parse tokenizer.json: %w", err)
	}
	if err := checkIDs(f.Model.Vocab, f.AddedTokens); err != nil {
		return nil, err
	}
	t := &Tokenizer{addedByID: map[int]*AddedToken{}}
	var err error
	if t.normalize, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer: normalizer: %w", err)
	}
	var byteLevel bool
	if t.pre, byteLevel, err = buildPreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("tokenizer: pre_tokenizer: %w", err)
	}
	if t.model, err = newBPE(f.Model, byteLevel); err != nil {
		return nil, fmt.Errorf("tokenizer: model: %w", err)
	}
	if t.decoder, err = buildDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("tokenizer: decoder: %w", err)
	}
	t.setAddedTokens(f.AddedTokens)
	if t.cfg, err = parseTokenizerConfig(configJSON); err != nil {
		return nil, fmt.Errorf("tokenizer: parse tokenizer_config.json: %w", err)
	}
	if chatTemplate != "" {
		t.cfg.templates = map[string]string{defaultTemplate: chatTemplate}
	}
	if t.chat, err = newChatTemplates(t.cfg.templates); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// maxTokenID bounds the ids a tokenizer.json may use: ids index dense
// tables (and are int32 inside the BPE), and real vocabularies stay far
// below (MiniCPM5's has 130,560 rows, the largest common ones 262,144).
const maxTokenID = 1<<22 - 1

// checkIDs refuses negative or absurd ids, which would otherwise index out
// of range or allocate a table of that size.
func checkIDs(vocab map[string]int, added []AddedToken) error {
	for tok, id := range vocab {
		if id < 0 || id > maxTokenID {
			return fmt.Errorf("tokenizer: model.vocab: token %q has id %d, outside [0, %d]", tok, id, maxTokenID)
		}
	}
	for _, a := range added {
		if a.ID < 0 || a.ID > maxTokenID {
			return fmt.Errorf("tokenizer: added_tokens: token %q has id %d, outside [0, %d]", a.Content, a.ID, maxTokenID)
		}
	}
	return nil
}

func (t *Tokenizer) setAddedTokens(tokens []AddedToken) {
	t.added = append([]AddedToken(nil), tokens...)
	sort.SliceStable(t.added, func(i, j int) bool { return t.added[i].ID < t.added[j].ID })
	size := 0
	for _, id := range t.model.vocab {
		size = max(size, id+1)
	}
	var raw, normalized []*AddedToken
	for i := range t.added {
		a := &t.added[i]
		t.addedByID[a.ID] = a
		size = max(size, a.ID+1)
		if a.Normalized && t.normalize != nil {
			normalized = append(normalized, a)
		} else {
			raw = append(raw, a)
		}
	}
	t.rawAdded = newAddedMatcher(raw)
	t.normAdded = newAddedMatcher(normalized)
	t.idToToken = make([]string, size)
	for tok, id := range t.model.vocab {
		t.idToToken[id] = tok
	}
	for _, a := range t.added {
		t.idToToken[a.ID] = a.Content
	}
}

// Encode returns the ids of text as HF `tokenizers` encodes it without a
// post-processor (add_special_tokens=False): added and special tokens
// written in the text become their own ids.
func (t *Tokenizer) Encode(text string) []int {
	return t.AppendEncode(nil, text)
}

// AppendEncode appends the ids of text to dst, saving an allocation when
// encoding many documents into one buffer.
func (t *Tokenizer) AppendEncode(dst []int, text string) []int {
	t.rawAdded.split(text, func(start, end int) {
		dst = t.appendStretch(dst, text[start:end], start == 0)
	}, func(a *AddedToken) {
		dst = append(dst, a.ID)
	})
	return dst
}

// appendStretch encodes text that holds no raw added token.
func (t *Tokenizer) appendStretch(dst []int, s string, atStart bool) []int {
	if t.normalize != nil {
		s = t.normalize(s)
	}
	t.normAdded.split(s, func(start, end int) {
		piece := s[start:end]
		if t.pre == nil {
			dst = t.model.appendWord(dst, piece)
			return
		}
		t.pre(piece, atStart && start == 0, func(word string, _ bool) {
			dst = t.model.appendWord(dst, word)
		})
	}, func(a *AddedToken) {
		dst = append(dst, a.ID)
	})
	return dst
}
