package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"dllm/diffusion"
	"dllm/model"
)

const convertFixture = "../../testdata/tiny-llama"

// runConvertCmd runs `dllm convert args...` and returns its standard output
// and error output.
func runConvertCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.Command{
		Name:      "dllm",
		Writer:    &out,
		ErrWriter: &errOut,
		Commands:  []*cli.Command{convertCommand()},
	}
	err := app.Run(context.Background(), append([]string{"dllm", "convert"}, args...))
	return out.String(), errOut.String(), err
}

func TestConvertCommand(t *testing.T) {
	preset := filepath.Join(t.TempDir(), "preset.yaml")
	if err := os.WriteFile(preset, []byte("block_size: 8\ndtype: bf16\ngeneration:\n  threshold: 0.8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badPreset := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(badPreset, []byte("block_size: 8\nblocksize: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string // --out is appended
		stdout []string
		errSub string
		check  func(t *testing.T, s *diffusion.Settings, out string)
	}{
		{"dry run", []string{"--from", convertFixture, "--dry-run"},
			[]string{"<|mask|> = 500, a padded row", "link     model.safetensors", "dry run: nothing written"}, "",
			func(t *testing.T, _ *diffusion.Settings, out string) {
				if _, err := os.Stat(out); err == nil {
					t.Error("--dry-run wrote the output")
				}
			}},
		{"defaults", []string{"--from", convertFixture}, []string{"mask <|mask|> = 500 (padded)", "1 linked", "source sha256 "}, "",
			func(t *testing.T, s *diffusion.Settings, out string) {
				if s.BlockSize != 32 || s.Generation.Threshold != 0.9 || s.CreatedBy != "dllm "+version {
					t.Errorf("settings %+v", s)
				}
				checkHFShape(t, out, "<|mask|>")
			}},
		{"preset and flags", []string{"--from", convertFixture, "--preset", preset, "--block-size", "4", "--mask-token", "<mask>", "--hash", "fast"},
			[]string{"mask <mask> = 500", "1 rewritten", "source fingerprint "}, "",
			func(t *testing.T, s *diffusion.Settings, out string) {
				// The flag wins over the preset; the preset over the defaults.
				if s.BlockSize != 4 || s.Generation.MaxStepsPerBlock != 4 || s.Generation.Threshold != 0.8 || s.MaskToken != "<mask>" {
					t.Errorf("settings %+v", s)
				}
				c, err := model.OpenCheckpoint(out)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if ti, _ := c.Tensor("model.norm.weight"); ti.DType != model.BF16 {
					t.Errorf("dtype %v, want the preset's BF16", ti.DType)
				}
			}},
		{"unknown preset key", []string{"--from", convertFixture, "--preset", badPreset}, nil, "field blocksize not found", nil},
		{"bad flag value", []string{"--from", convertFixture, "--dtype", "int8"}, nil, `dtype "int8"`, nil},
		{"missing input", []string{"--from", filepath.Join(t.TempDir(), "none")}, nil, "no such file", nil},
		{"no --from", nil, nil, `"from" not set`, nil},
		{"block size 0", []string{"--from", convertFixture, "--block-size", "0"}, nil, "convert: block_size 0: want at least 1 (--block-size", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "model")
			stdout, _, err := runConvertCmd(t, append(tt.args, "--out", out)...)
			if tt.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errSub) {
					t.Fatalf("error %v, want one containing %q", err, tt.errSub)
				}
				if _, err := os.Stat(out); err == nil {
					t.Error("a failed conversion left its output")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, stdout)
				}
			}
			var s *diffusion.Settings
			if !strings.Contains(stdout, "dry run") {
				if s, err = diffusion.LoadSettings(out); err != nil {
					t.Fatal(err)
				}
			}
			tt.check(t, s, out)
		})
	}
}

// checkHFShape checks what transformers and other dLLM tools read of a
// model directory: tokenizer_config.json's mask_token (their
// tokenizer.mask_token_id) and a directory as readable as HF's (0755).
func checkHFShape(t *testing.T, dir, mask string) {
	t.Helper()
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("%s: mode %v, %v; want 0755", dir, info.Mode().Perm(), err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	var cfg struct {
		MaskToken string `json:"mask_token"`
	}
	if err != nil || json.Unmarshal(b, &cfg) != nil || cfg.MaskToken != mask {
		t.Errorf("%s: tokenizer_config.json mask_token %q (%v), want %q", dir, cfg.MaskToken, err, mask)
	}
}
