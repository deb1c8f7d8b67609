package tokenizer

import (
	"os"
	"path/filepath"
	"testing"
)

func TestExpectedEncodings(t *testing.T) {
	cases := []struct {
		name, expected string
		tok            func(testing.TB) *Tokenizer
	}{
		{"qwen3", filepath.Join(qwenDir, "expected.json"), qwen},
		{"tiny-llama", filepath.Join(tinyDir, "tokenizer_expected.json"), func(tb testing.TB) *Tokenizer { return load(tb, tinyDir) }},
	}
	for _, c := range cases {
		tok := c.tok(t)
		for _, e := range readExpectations(t, c.expected).Encode {
			t.Run(c.name+"/"+e.Text, func(t *testing.T) {
				ids := tok.Encode(e.Text)
				if !equalIDs(ids, e.IDs) {
					t.Fatalf("Encode(%q) = %v, want %v", e.Text, ids, e.IDs)
				}
				if got := tok.Decode(ids, false); got != e.Decoded {
					t.Fatalf("Decode = %q, want %q", got, e.Decoded)
				}
			})
		}
	}
}

// TestLoadGunzippedDir loads Qwen3 the way a checkpoint directory is read.
func TestLoadGunzippedDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, TokenizerFile), gunzipQwen(t))
	cfg, err := os.ReadFile(filepath.Join(qwenDir, TokenizerConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, TokenizerConfigFile), cfg)
	for _, path := range []string{dir, filepath.Join(dir, TokenizerFile)} {
		tok := load(t, path)
		if got, want := tok.Encode("Hello, world!"), []int{9707, 11, 1879, 0}; !equalIDs(got, want) {
			t.Errorf("Load(%s).Encode = %v, want %v", path, got, want)
		}
	}
	if !load(t, dir).HasChatTemplate() || load(t, filepath.Join(dir, TokenizerFile)).HasChatTemplate() {
		t.Error("only the directory form should find the chat template")
	}
}
