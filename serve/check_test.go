package serve

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dllm/diffusion"
	"dllm/model"
	"dllm/torch"
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
	if err := diffusion.NewSettings(511, diffusion.DefaultMaskToken, 4, true).Save(dir); err != nil {
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

// TestLoadVerifies: Load refuses weights whose bytes differ from the sha256
// dllm.json records, and weights holding NaN even with no sum recorded;
// with Verify off it loads them as they are.
func TestLoadVerifies(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Skip(err)
	}
	good := readFile(t, filepath.Join(tinyDir, "model.safetensors"))
	dataStart := 8 + int(binary.LittleEndian.Uint64(good))
	sum := sha256.Sum256(good)
	flipped := slices.Clone(good)
	flipped[dataStart+100] ^= 0x04
	withNaN := slices.Clone(good)
	binary.LittleEndian.PutUint32(withNaN[dataStart+64:], math.Float32bits(float32(math.NaN())))
	cases := []struct {
		name    string
		weights []byte
		record  bool // dllm.json records the good file's sha256
		verify  bool
		want    string // "" = loads
	}{
		{"good, recorded", good, true, true, ""},
		{"good, not recorded", good, false, true, ""},
		{"a flipped bit", flipped, true, true, "sha256"},
		{"a flipped bit, not verified", flipped, true, false, ""},
		{"NaN, not recorded", withNaN, false, true, "NaN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := tinyModelFiles(t, nil)
			os.Remove(filepath.Join(dir, "model.safetensors"))
			if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), c.weights, 0o644); err != nil {
				t.Fatal(err)
			}
			if c.record {
				s, err := diffusion.LoadSettings(dir)
				if err != nil {
					t.Fatal(err)
				}
				s.WeightsSHA256 = map[string]string{"model.safetensors": hex.EncodeToString(sum[:])}
				if err := s.Save(dir); err != nil {
					t.Fatal(err)
				}
			}
			ck, err := Check(dir)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ck.Load(context.Background(), LoadOptions{Device: torch.CPU, DType: torch.Float32, Verify: c.verify})
			if m != nil && m.Close != nil {
				defer m.Close()
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Load: %v, want an error about %q", err, c.want)
			}
		})
	}
}

// --kv-cache-gb caps the sequences run at once by their slots' bytes, and
// without it a GPU's free memory (less the forwards' headroom) does; one
// that cannot hold a single slot says what to change.
func TestSlots(t *testing.T) {
	cfg, err := model.LoadConfig(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	c := &Checked{Config: cfg}
	slotBytes := cfg.KVBytesPerToken(4) * 64 // f32, 64 positions
	slot := float64(slotBytes) / (1 << 30)
	// The folded QKV and gate-up weights' copies, in f32.
	fold := int64(cfg.NumHiddenLayers*((cfg.NumAttentionHeads+2*cfg.NumKeyValueHeads)*cfg.HeadDim+2*cfg.IntermediateSize)*cfg.HiddenSize) * 4
	for _, tc := range []struct {
		seqs   int
		gb     float64
		free   int64
		want   int
		folded bool // the norm folded into the weights (not --no-norm-fold)
	}{
		{0, 0, 0, 1, false}, {1, 0, 0, 1, false}, {8, 0, 0, 8, false},
		{8, 3.5 * slot, 0, 3, false}, {8, 100 * slot, 0, 8, false}, {2, 1.01 * slot, 0, 1, false}, {2, 0.9 * slot, 0, 0, false},
		{8, 0, kvHeadroom + 7*slotBytes/2, 3, false}, {2, 0, kvHeadroom + 100*slotBytes, 2, false}, {2, 0, kvHeadroom + slotBytes/2, 0, false},
		{8, 2.5 * slot, kvHeadroom + 100*slotBytes, 2, false}, // --kv-cache-gb wins
		{1, 0, kvHeadroom / 2, 1, false},                      // one stream: the single-stream decoder sizes its own
		{8, 0, kvHeadroom + fold + 7*slotBytes/2, 3, true}, {8, 0, kvHeadroom + 7*slotBytes/2, 0, true},
	} {
		n, err := c.Slots(LoadOptions{DType: torch.Float32, MaxModelLen: 64, MaxNumSeqs: tc.seqs, KVCacheGB: tc.gb, NoNormFold: !tc.folded}, tc.free)
		switch {
		case tc.want == 0 && (err == nil || !strings.Contains(err.Error(), "--max-model-len")):
			t.Errorf("%d seqs in %.2g GiB, %d free: %d, %v; want an error naming --max-model-len", tc.seqs, tc.gb, tc.free, n, err)
		case tc.want > 0 && (err != nil || n != tc.want):
			t.Errorf("%d seqs in %.2g GiB, %d free: %d, %v; want %d", tc.seqs, tc.gb, tc.free, n, err, tc.want)
		}
	}
}
