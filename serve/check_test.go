package serve

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dllm/diffusion"
)

// tinyModelFiles makes a dllm model directory from testdata/tiny-llama
// without the binary: links to its files, a dllm.json, and the
// tokenizer_config.json given (nil: the fixture's own).
func tinyModelFiles(t *testing.T, tokenizerConfig []byte) string {
	t.Helper()
	src, err := filepath.Abs(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		if f == "tokenizer_config.json" && tokenizerConfig != nil {
			if err := os.WriteFile(filepath.Join(dir, f), tokenizerConfig, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	s := &diffusion.Settings{FormatVersion: diffusion.FormatVersion, MaskTokenID: 511, MaskToken: diffusion.DefaultMaskToken,
		BlockSize: 4, Attention: diffusion.AttentionBlock, Shift: true, Generation: diffusion.DefaultGeneration(4)}
	if err := s.Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// withChatTemplate is the fixture's tokenizer_config.json with another
// chat_template.
func withChatTemplate(t *testing.T, tpl string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(readFile(t, filepath.Join(tinyDir, "tokenizer_config.json")), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["chat_template"] = tpl
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckChatTemplate: a chat template that cannot render a plain
// conversation stops the server at start-up with the template's error,
// instead of a healthy server whose every chat is a 400.
func TestCheckChatTemplate(t *testing.T) {
	cases := []struct {
		name string
		tpl  string
		want string // "" = Check passes
	}{
		{"the fixture's", "", ""},
		{"plain", "{% for m in messages %}{{ m.content }}{% endfor %}", ""},
		{"unknown tag", "{% for m in messages %}\n{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}", "line 2"},
		{"raises", "{{ raise_exception('Conversation roles must alternate') }}", "Conversation roles must alternate"},
		{"unknown filter", "{{ messages | nosuch }}", "nosuch"},
		{"includes a file", "{% include '/etc/hostname' %}", "cannot include"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cfg []byte
			if c.tpl != "" {
				cfg = withChatTemplate(t, c.tpl)
			}
			_, err := Check(tinyModelFiles(t, cfg))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "chat template")):
				t.Fatalf("Check: %v, want an error about the chat template containing %q", err, c.want)
			}
		})
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
