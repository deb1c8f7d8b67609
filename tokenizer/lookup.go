package tokenizer

// TokenID returns the id of a token as written in the vocabulary or the
// added tokens, e.g. TokenID("<|im_end|>").
func (t *Tokenizer) TokenID(token string) (int, bool) {
	for _, a := range t.added {
		if a.Content == token {
			return a.ID, true
		}
	}
	id, ok := t.model.vocab[token]
	return id, ok
}

// Token returns the vocabulary spelling of id (byte-level tokens in GPT-2's
// byte alphabet, e.g. "Ġthe").
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.idToToken) {
		return "", false
	}
	if _, ok := t.addedByID[id]; ok {
		return t.idToToken[id], true
	}
	tok := t.idToToken[id]
	_, ok := t.model.vocab[tok]
	return tok, ok
}

// VocabSize is one more than the largest id of the vocabulary and added
// tokens; a model's embedding table may be padded beyond it.
func (t *Tokenizer) VocabSize() int { return len(t.idToToken) }

// AddedTokens lists the added tokens by id.
func (t *Tokenizer) AddedTokens() []AddedToken {
	return append([]AddedToken(nil), t.added...)
}

// IsSpecial reports whether id is an added token marked special, the ones
// Decode drops when skipping special tokens.
func (t *Tokenizer) IsSpecial(id int) bool {
	a, ok := t.addedByID[id]
	return ok && a.Special
}

// BOS returns the id of tokenizer_config.json's bos_token.
func (t *Tokenizer) BOS() (int, bool) { return t.configToken(t.cfg.BOSToken) }

// EOS returns the id of tokenizer_config.json's eos_token.
func (t *Tokenizer) EOS() (int, bool) { return t.configToken(t.cfg.EOSToken) }

// AddBOS reports tokenizer_config.json's add_bos_token: whether a BOS id
// should precede encoded documents (Encode never adds one itself).
func (t *Tokenizer) AddBOS() bool { return t.cfg.AddBOS }

func (t *Tokenizer) configToken(tok string) (int, bool) {
	if tok == "" {
		return 0, false
	}
	return t.TokenID(tok)
}
