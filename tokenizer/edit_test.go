package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyTiny copies the tiny-llama tokenizer files into a temp dir, adding an
// unknown field to each to check that edits keep it.
func copyTiny(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{TokenizerFile, TokenizerConfigFile} {
		data := mustRead(t, filepath.Join(tinyDir, name))
		data = []byte(strings.Replace(string(data), "{", `{"x_unknown": {"keep": [1, "me"]},`, 1))
		writeFile(t, filepath.Join(dir, name), data)
	}
	return dir
}

func TestAddSpecialToken(t *testing.T) {
	dir := copyTiny(t)
	before := load(t, dir)
	const mask, id = "<|mask|>", 505
	for range 2 { // the second call must be a no-op
		if err := AddSpecialToken(dir, mask, id); err != nil {
			t.Fatal(err)
		}
	}
	tok := load(t, dir)
	if got, ok := tok.TokenID(mask); !ok || got != id || !tok.IsSpecial(id) {
		t.Fatalf("TokenID(%q) = %d, %v; IsSpecial = %v", mask, got, ok, tok.IsSpecial(id))
	}
	if tok.VocabSize() != id+1 {
		t.Errorf("VocabSize = %d, want %d", tok.VocabSize(), id+1)
	}
	text := "a<|mask|><|mask|> b"
	ids := tok.Encode(text)
	want := append(append(before.Encode("a"), id, id), before.Encode(" b")...)
	if !equalIDs(ids, want) {
		t.Errorf("Encode(%q) = %v, want %v", text, ids, want)
	}
	if got := tok.Decode(ids, true); got != "a b" {
		t.Errorf("Decode(skip special) = %q", got)
	}
	for _, name := range []string{TokenizerFile, TokenizerConfigFile} {
		// Tokens stay readable: no "\u003c|im_end|\u003e" from HTML escaping.
		if b := mustRead(t, filepath.Join(dir, name)); bytes.Contains(b, []byte(`\u003c`)) {
			t.Errorf("%s has HTML-escaped tokens", name)
		}
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(mustRead(t, filepath.Join(dir, name)), &doc); err != nil {
			t.Fatal(err)
		}
		if keep := string(doc["x_unknown"]); !strings.Contains(keep, `"me"`) {
			t.Errorf("%s lost its unknown field: %q", name, keep)
		}
	}
	var cfg struct {
		Decoder map[string]AddedToken `json:"added_tokens_decoder"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(dir, TokenizerConfigFile)), &cfg); err != nil {
		t.Fatal(err)
	}
	// The fixture's config has no added_tokens_decoder yet.
	if e := cfg.Decoder["505"]; e.Content != mask || !e.Special || len(cfg.Decoder) != 1 {
		t.Errorf("added_tokens_decoder = %+v", cfg.Decoder)
	}
	added := tok.AddedTokens()
	if last := added[len(added)-1]; last.ID != id || last.Content != mask {
		t.Errorf("AddedTokens ends with %+v", last)
	}
}

func TestAddSpecialTokenConflicts(t *testing.T) {
	cases := []struct {
		content string
		id      int
		want    string
	}{
		{"<|mask|>", 1, `already the added token "<|im_end|>"`},
		{"<|im_end|>", 506, "already the added token id 1"},
		{"<|mask|>", 100, "is the vocabulary's"},
		{"", 506, "non-empty"},
	}
	for _, c := range cases {
		dir := copyTiny(t)
		err := AddSpecialToken(dir, c.content, c.id)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AddSpecialToken(%q, %d) = %v, want %q", c.content, c.id, err, c.want)
		}
	}
	if err := AddSpecialToken(t.TempDir(), "<|mask|>", 506); err == nil {
		t.Error("missing tokenizer.json: want an error")
	}
}

func TestAddSpecialTokenWithoutConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, TokenizerFile), mustRead(t, filepath.Join(spDir, TokenizerFile)))
	if err := AddSpecialToken(dir, "<mask>", 300); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, TokenizerConfigFile)); !os.IsNotExist(err) {
		t.Errorf("tokenizer_config.json should not be created: %v", err)
	}
	if id, ok := load(t, dir).TokenID("<mask>"); !ok || id != 300 {
		t.Errorf("TokenID = %d, %v", id, ok)
	}
}

// SetMaskToken registers the mask where transformers reads it, creating
// tokenizer_config.json when there is none, and twice is once.
func TestSetMaskToken(t *testing.T) {
	for _, withConfig := range []bool{true, false} {
		dir := copyTiny(t)
		if !withConfig {
			os.Remove(filepath.Join(dir, TokenizerConfigFile))
		}
		for range 2 {
			if err := SetMaskToken(dir, "<|mask|>", 500); err != nil {
				t.Fatal(err)
			}
		}
		tok := load(t, dir)
		if id, ok := tok.TokenID("<|mask|>"); !ok || id != 500 || !tok.IsSpecial(500) {
			t.Errorf("config %v: mask %d %v", withConfig, id, ok)
		}
		cfg := string(mustRead(t, filepath.Join(dir, TokenizerConfigFile)))
		if !strings.Contains(cfg, `"mask_token": "<|mask|>"`) || withConfig && !strings.Contains(cfg, "x_unknown") {
			t.Errorf("config %v: tokenizer_config.json:\n%s", withConfig, cfg)
		}
	}
}
