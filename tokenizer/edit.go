package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// AddSpecialToken registers content (e.g. "<|mask|>") as a special added
// token with the given id in the checkpoint directory dir: tokenizer.json's
// added_tokens and, when the file exists, tokenizer_config.json's
// added_tokens_decoder. Every other field is kept as it was. Adding the
// same token at the same id again is a no-op; an id or content already
// used by a different token is an error.
func AddSpecialToken(dir, content string, id int) error {
	if content == "" || id < 0 {
		return fmt.Errorf("tokenizer: add special token: want non-empty content and id >= 0, got %q at %d", content, id)
	}
	tokPath := filepath.Join(dir, TokenizerFile)
	data, err := os.ReadFile(tokPath)
	if err != nil {
		return fmt.Errorf("tokenizer: add special token: %w", err)
	}
	changed, err := addToTokenizerJSON(&data, content, id)
	if err != nil {
		return fmt.Errorf("tokenizer: add special token %q to %s: %w", content, tokPath, err)
	}
	if changed {
		if err := writeAtomic(tokPath, data); err != nil {
			return fmt.Errorf("tokenizer: add special token: %w", err)
		}
	}
	cfgPath := filepath.Join(dir, TokenizerConfigFile)
	cfg, err := os.ReadFile(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tokenizer: add special token: %w", err)
	}
	if err := addToConfigJSON(&cfg, content, id); err != nil {
		return fmt.Errorf("tokenizer: add special token %q to %s: %w", content, cfgPath, err)
	}
	if err := writeAtomic(cfgPath, cfg); err != nil {
		return fmt.Errorf("tokenizer: add special token: %w", err)
	}
	return nil
}

// addToTokenizerJSON inserts the token into added_tokens, keeping them
// sorted by id as HF writes them.
func addToTokenizerJSON(data *[]byte, content string, id int) (changed bool, err error) {
	doc, err := parseRawObject(*data)
	if err != nil {
		return false, err
	}
	var f fileJSON
	if err := json.Unmarshal(*data, &f); err != nil {
		return false, err
	}
	var list []json.RawMessage
	if raw, ok := doc.get("added_tokens"); ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &list); err != nil {
			return false, fmt.Errorf("added_tokens: %w", err)
		}
	}
	at := len(list)
	for i, a := range f.AddedTokens {
		switch {
		case a.ID == id && a.Content == content:
			return false, nil
		case a.ID == id:
			return false, fmt.Errorf("id %d is already the added token %q", id, a.Content)
		case a.Content == content:
			return false, fmt.Errorf("%q is already the added token id %d", content, a.ID)
		case a.ID > id && at == len(list):
			at = i
		}
	}
	for tok, vid := range f.Model.Vocab {
		if vid == id && tok != content {
			return false, fmt.Errorf("id %d is the vocabulary's %q", id, tok)
		}
		if tok == content && vid != id {
			return false, fmt.Errorf("%q is already the vocabulary's id %d", content, vid)
		}
	}
	entry, err := marshalRaw(AddedToken{ID: id, Content: content, Special: true})
	if err != nil {
		return false, err
	}
	list = append(list[:at], append([]json.RawMessage{entry}, list[at:]...)...)
	raw, err := marshalRaw(list)
	if err != nil {
		return false, err
	}
	doc.set("added_tokens", raw)
	*data, err = doc.indented()
	return true, err
}

// addToConfigJSON adds the token to added_tokens_decoder, whose keys are
// ids as strings, in ascending id order.
func addToConfigJSON(data *[]byte, content string, id int) error {
	doc, err := parseRawObject(*data)
	if err != nil {
		return err
	}
	var decoder rawObject
	if raw, ok := doc.get("added_tokens_decoder"); ok && !isNull(raw) {
		if decoder, err = parseRawObject(raw); err != nil {
			return fmt.Errorf("added_tokens_decoder: %w", err)
		}
	}
	key := strconv.Itoa(id)
	if raw, ok := decoder.get(key); ok {
		var existing struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &existing); err != nil || existing.Content != content {
			return fmt.Errorf("added_tokens_decoder already maps %s to %s", key, raw)
		}
		return nil
	}
	// transformers serialises these fields alphabetically.
	entry, err := marshalRaw(struct {
		Content    string `json:"content"`
		LStrip     bool   `json:"lstrip"`
		Normalized bool   `json:"normalized"`
		RStrip     bool   `json:"rstrip"`
		SingleWord bool   `json:"single_word"`
		Special    bool   `json:"special"`
	}{Content: content, Special: true})
	if err != nil {
		return err
	}
	at := sort.Search(len(decoder), func(i int) bool {
		n, err := strconv.Atoi(decoder[i].Key)
		return err == nil && n > id
	})
	decoder.insert(at, key, entry)
	raw, err := decoder.MarshalJSON()
	if err != nil {
		return err
	}
	doc.set("added_tokens_decoder", raw)
	*data, err = doc.indented()
	return err
}

// writeAtomic replaces path's contents without ever leaving a truncated
// file behind, keeping its permissions.
func writeAtomic(path string, data []byte) error {
	mode := fs.FileMode(0o644)
	if info, err := os.Stat(path); err == nil {
		mode = info.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// SetMaskToken makes content at id the tokenizer's mask token in dir, as
// transformers and other dLLM tools read it: a special added token
// (AddSpecialToken) unless the tokenizer already maps content to id, and
// tokenizer_config.json's "mask_token" (the file is created when missing),
// so that tokenizer.mask_token_id is id.
func SetMaskToken(dir, content string, id int) error {
	tok, err := Load(dir)
	if err != nil {
		return fmt.Errorf("tokenizer: set mask token: %w", err)
	}
	if have, ok := tok.TokenID(content); !ok || have != id {
		if err := AddSpecialToken(dir, content, id); err != nil {
			return err
		}
	}
	cfgPath := filepath.Join(dir, TokenizerConfigFile)
	cfg, err := os.ReadFile(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		cfg, err = []byte("{}"), nil
	}
	if err != nil {
		return fmt.Errorf("tokenizer: set mask token: %w", err)
	}
	doc, err := parseRawObject(cfg)
	if err != nil {
		return fmt.Errorf("tokenizer: set mask token: %s: %w", cfgPath, err)
	}
	raw, err := marshalRaw(content)
	if err != nil {
		return err
	}
	doc.set("mask_token", raw)
	if cfg, err = doc.indented(); err != nil {
		return err
	}
	if err := writeAtomic(cfgPath, cfg); err != nil {
		return fmt.Errorf("tokenizer: set mask token: %w", err)
	}
	return nil
}
