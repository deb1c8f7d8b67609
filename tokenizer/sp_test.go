package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Ids of the hand-made fixture (see testdata/sp-bytefallback/README.md).
const (
	spBOS, spEOS       = 1, 2
	spSpace, spH       = 259, 260
	spL, spD           = 262, 266
	spHelloBare        = 270 // "hello"
	spHello, spWor     = 271, 274
	spByte0            = 3 // <0x00>; <0xNN> is spByte0+NN
	spByteC3, spByteA9 = spByte0 + 0xC3, spByte0 + 0xA9
)

func TestSentencePieceByteFallback(t *testing.T) {
	tok := load(t, spDir)
	cases := []struct {
		text    string
		ids     []int
		decoded string // with special tokens
		skipped string // skip_special_tokens
	}{
		{"hello world", []int{spHello, spWor, spL, spD}, "hello world", "hello world"},
		{"hé!", []int{spSpace, spH, spByteC3, spByteA9, spByte0 + '!'}, "hé!", "hé!"},
		{"x", []int{spSpace, spByte0 + 'x'}, "x", "x"},
		{"😀", []int{spSpace, spByte0 + 0xF0, spByte0 + 0x9F, spByte0 + 0x98, spByte0 + 0x80}, "😀", "😀"},
		{"  ", []int{spSpace, spSpace, spSpace}, "  ", "  "},
		{"", nil, "", ""},
		// The text after an added token is normalized on its own, so it
		// gets its own "▁" prefix, as in HF's legacy Llama tokenizer.
		{"<s>hello", []int{spBOS, spHello}, "<s> hello", "hello"},
		{"hello</s>", []int{spHello, spEOS}, "hello</s>", "hello"},
	}
	for _, c := range cases {
		t.Run(c.text, func(t *testing.T) {
			ids := tok.Encode(c.text)
			if !equalIDs(ids, c.ids) {
				t.Fatalf("Encode(%q) = %v, want %v", c.text, ids, c.ids)
			}
			if got := tok.Decode(ids, false); got != c.decoded {
				t.Errorf("Decode = %q, want %q", got, c.decoded)
			}
			if got := tok.Decode(ids, true); got != c.skipped {
				t.Errorf("Decode(skip special) = %q, want %q", got, c.skipped)
			}
		})
	}
	if bos, ok := tok.BOS(); !ok || bos != spBOS || !tok.AddBOS() {
		t.Errorf("BOS() = %d, %v; AddBOS() = %v", bos, ok, tok.AddBOS())
	}
}

// TestMetaspace swaps the fixture's legacy normalizer for the Metaspace
// pre-tokenizer and decoder, whose "first" scheme adds "▁" only at the very
// start of the input.
func TestMetaspace(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(spDir, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	meta := map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}
	doc["normalizer"] = nil
	doc["pre_tokenizer"] = meta
	doc["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "ByteFallback"}, meta}}
	data, err = json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		text    string
		ids     []int
		decoded string
	}{
		{"hello world", []int{spHello, spWor, spL, spD}, "hello world"},
		{"<s>hello", []int{spBOS, spHelloBare}, "<s>hello"},
		{"hé", []int{spSpace, spH, spByteC3, spByteA9}, "hé"},
	}
	for _, c := range cases {
		ids := tok.Encode(c.text)
		if !equalIDs(ids, c.ids) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, ids, c.ids)
		}
		if got := tok.Decode(ids, false); got != c.decoded {
			t.Errorf("Decode(%v) = %q, want %q", ids, got, c.decoded)
		}
	}
}
