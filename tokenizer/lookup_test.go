package tokenizer

import (
	"strings"
	"sync"
	"testing"
)

func TestLookups(t *testing.T) {
	qwenTok, tiny := qwen(t), load(t, tinyDir)
	cases := []struct {
		name      string
		tok       *Tokenizer
		vocabSize int
		added     int
		eos       int
		bos       int // -1: none
		token     string
		tokenID   int
		special   bool
	}{
		{"qwen3", qwenTok, 151669, 26, 151645, -1, "<|im_end|>", 151645, true},
		{"qwen3 think", qwenTok, 151669, 26, 151645, -1, "<think>", 151667, false},
		{"qwen3 vocab", qwenTok, 151669, 26, 151645, -1, "Ġthe", 279, false},
		{"tiny", tiny, 500, 5, 1, 0, "<|im_start|>", 2, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.tok.VocabSize(); got != c.vocabSize {
				t.Errorf("VocabSize = %d, want %d", got, c.vocabSize)
			}
			if got := len(c.tok.AddedTokens()); got != c.added {
				t.Errorf("%d added tokens, want %d", got, c.added)
			}
			if eos, ok := c.tok.EOS(); !ok || eos != c.eos {
				t.Errorf("EOS = %d, %v, want %d", eos, ok, c.eos)
			}
			if bos, ok := c.tok.BOS(); ok != (c.bos >= 0) || ok && bos != c.bos {
				t.Errorf("BOS = %d, %v, want %d", bos, ok, c.bos)
			}
			id, ok := c.tok.TokenID(c.token)
			if !ok || id != c.tokenID {
				t.Errorf("TokenID(%q) = %d, %v, want %d", c.token, id, ok, c.tokenID)
			}
			if got := c.tok.IsSpecial(id); got != c.special {
				t.Errorf("IsSpecial(%d) = %v, want %v", id, got, c.special)
			}
			if tok, ok := c.tok.Token(id); !ok || tok != c.token {
				t.Errorf("Token(%d) = %q, %v", id, tok, ok)
			}
		})
	}
	if _, ok := qwenTok.Token(-1); ok {
		t.Error("Token(-1) should not exist")
	}
	if _, ok := qwenTok.TokenID("no such token"); ok {
		t.Error("TokenID of an unknown string should fail")
	}
}

func TestDecodeSkipsSpecialAndUnknown(t *testing.T) {
	tok := qwen(t)
	ids := tok.Encode("<|im_start|>user\n<think>x</think><|im_end|>")
	if got, want := tok.Decode(ids, true), "user\n<think>x</think>"; got != want {
		t.Errorf("skip special: %q, want %q", got, want)
	}
	if got := tok.Decode([]int{9707, -5, 1 << 30}, false); got != "Hello" {
		t.Errorf("unknown ids: %q, want Hello", got)
	}
}

func TestUnsupportedComponents(t *testing.T) {
	base := string(mustRead(t, tinyDir+"/"+TokenizerFile))
	cases := []struct {
		name, old, new, want string
	}{
		{"model", `"type": "BPE"`, `"type": "WordPiece"`, `model type "WordPiece"`},
		{"normalizer", `"type": "NFC"`, `"type": "Precompiled"`, `normalizer type "Precompiled"`},
		{"decoder", "\"decoder\": {\n    \"type\": \"ByteLevel\"", `"decoder": {"type": "WordPiece"`, `decoder type "WordPiece"`},
		{"split behavior", `"behavior": "Isolated"`, `"behavior": "Sideways"`, `split behavior "Sideways"`},
		{"bad regex", `"Regex": "`, `"Regex": "(?<",  "x": "`, "split pattern"},
		{"not json", `{`, `[`, "parse tokenizer.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := strings.Replace(base, c.old, c.new, 1)
			if data == base {
				t.Fatalf("fixture has no %q", c.old)
			}
			_, err := Parse([]byte(data), nil, "")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestEncodeConcurrent(t *testing.T) {
	tok := qwen(t)
	text := strings.Repeat("The quick brown fox 数学 🤖 jumps; 12345\n", 50)
	want := tok.Encode(text)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if got := tok.Encode(text); !equalIDs(got, want) {
					t.Error("concurrent Encode differs")
					return
				}
			}
		})
	}
	wg.Wait()
}
