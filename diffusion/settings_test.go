package diffusion

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func validSettings() *Settings {
	return &Settings{
		FormatVersion: FormatVersion,
		MaskTokenID:   500,
		MaskToken:     DefaultMaskToken,
		BlockSize:     32,
		Attention:     AttentionBlock,
		Shift:         true,
		Source: Source{
			Path:         "/models/minicpm5-2b",
			SHA256:       strings.Repeat("ab", 32),
			Architecture: "LlamaForCausalLM",
		},
		WeightsSHA256: map[string]string{"model.safetensors": strings.Repeat("cd", 32)},
		CreatedBy:     "dllm test",
		CreatedAt:     time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Generation:    DefaultGeneration(32, true),
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := validSettings()
	if err := want.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadSettings(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(512); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("Save left %d files, want only %s", len(entries), SettingsFile)
	}
	if info, _ := os.Stat(filepath.Join(dir, SettingsFile)); info.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", info.Mode().Perm())
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*Settings)
		vocab  int
		errSub string // "" = valid
	}{
		{"valid", func(*Settings) {}, 512, ""},
		{"vocab unknown", func(s *Settings) { s.MaskTokenID = 1 << 20 }, 0, ""},
		{"fingerprint instead of sha", func(s *Settings) { s.Source.SHA256, s.Source.Fingerprint = "", strings.Repeat("0", 64) }, 512, ""},
		{"mask outside vocab", func(s *Settings) { s.MaskTokenID = 512 }, 512, "outside the model's 512"},
		{"negative mask", func(s *Settings) { s.MaskTokenID = -1 }, 512, "negative"},
		{"empty mask token", func(s *Settings) { s.MaskToken = "" }, 512, "mask_token is empty"},
		{"zero block", func(s *Settings) { s.BlockSize = 0 }, 512, "block_size 0"},
		{"attention", func(s *Settings) { s.Attention = "full" }, 512, `attention "full"`},
		{"version", func(s *Settings) { s.FormatVersion = 2 }, 512, "format_version 2"},
		{"bad sha", func(s *Settings) { s.Source.SHA256 = "xyz" }, 512, "source.sha256"},
		{"bad fingerprint", func(s *Settings) { s.Source.Fingerprint = "ABC" }, 512, "source.fingerprint"},
		{"no weight sums", func(s *Settings) { s.WeightsSHA256 = nil }, 512, ""},
		{"verify without the shift", func(s *Settings) { s.Shift, s.Generation.Verify = false, true }, 512, "verify needs shift"},
		{"no shift, no verify", func(s *Settings) { s.Shift, s.Generation.Verify = false, false }, 512, ""},
		{"shard sums", weightSums("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"), 512, ""},
		{"weight sum uppercase", func(s *Settings) { s.WeightsSHA256["model.safetensors"] = strings.Repeat("AB", 32) }, 512, "64 lowercase hex"},
		{"weight sum short", func(s *Settings) { s.WeightsSHA256["model.safetensors"] = "abcd" }, 512, "64 lowercase hex"},
		{"weight file in a subdirectory", weightSums("sub/model.safetensors"), 512, `key "sub/model.safetensors" is not`},
		{"weight file outside", weightSums("../model.safetensors"), 512, "is not a .safetensors file name"},
		{"weight file backslash", weightSums(`a\b.safetensors`), 512, "is not a .safetensors file name"},
		{"weight file not safetensors", weightSums("config.json"), 512, `key "config.json" is not`},
		{"weight file only suffix", weightSums(".safetensors"), 512, "is not a .safetensors file name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSettings()
			tt.edit(s)
			err := s.Validate(tt.vocab)
			if tt.errSub == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errSub) {
				t.Fatalf("error %v, want one containing %q", err, tt.errSub)
			}
		})
	}
}

// weightSums sets weights_sha256 to valid sums for the named files.
func weightSums(names ...string) func(*Settings) {
	return func(s *Settings) {
		s.WeightsSHA256 = map[string]string{}
		for _, n := range names {
			s.WeightsSHA256[n] = strings.Repeat("0f", 32)
		}
	}
}

func TestLoadSettingsErrors(t *testing.T) {
	const good = `{"format_version":1,"mask_token_id":5,"mask_token":"<|mask|>","block_size":32,
"attention":"block","shift":true,"source":{"path":"/x","architecture":"LlamaForCausalLM"},
"created_by":"dllm dev","created_at":"2026-11-30T00:00:00Z",
"generation":{"threshold":0.9,"max_steps_per_block":32,"temperature":0,"top_p":1}}`
	tests := []struct {
		name    string
		content *string // nil: no file
		errSub  string
	}{
		{"good", ptr(good), ""},
		{"missing file", nil, "no dllm.json"},
		{"bad JSON", ptr(`{"format_version":1,`), "bad JSON"},
		{"no version", ptr(`{"block_size":32}`), "no format_version"},
		{"future version", ptr(`{"format_version":2,"new_field":true}`), "format_version 2 is not supported"},
		{"unknown key", ptr(strings.Replace(good, `"shift":true`, `"shift":true,"shfit":false`, 1)), `unknown field "shfit"`},
		{"unknown nested key", ptr(strings.Replace(good, `"top_p":1`, `"top_p":1,"top_k":5`, 1)), `unknown field "top_k"`},
		{"trailing data", ptr(good + `{}`), "bad JSON"},
		{"invalid value", ptr(strings.Replace(good, `"block_size":32`, `"block_size":0`, 1)), "block_size 0"},
		{"weight sums", ptr(strings.Replace(good, `"shift":true`, `"shift":true,"weights_sha256":{"model.safetensors":"`+strings.Repeat("0a", 32)+`"}`, 1)), ""},
		{"bad weight sum", ptr(strings.Replace(good, `"shift":true`, `"shift":true,"weights_sha256":{"model.safetensors":"0a"}`, 1)), "weights_sha256"},
		{"negative mask", ptr(strings.Replace(good, `"mask_token_id":5`, `"mask_token_id":-3`, 1)), "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.content != nil {
				if err := os.WriteFile(filepath.Join(dir, SettingsFile), []byte(*tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, err := LoadSettings(dir)
			if tt.errSub == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if s.MaskTokenID != 5 || s.Generation.TopP != 1 {
					t.Fatalf("decoded %+v", s)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errSub) {
				t.Fatalf("error %v, want one containing %q", err, tt.errSub)
			}
		})
	}
}

func TestSaveRefusesInvalid(t *testing.T) {
	dir := t.TempDir()
	s := validSettings()
	s.BlockSize = 0
	if err := s.Save(dir); err == nil {
		t.Fatal("Save wrote invalid settings")
	}
	if _, err := os.Stat(filepath.Join(dir, SettingsFile)); err == nil {
		t.Fatal("invalid settings file exists")
	}
}

func ptr(s string) *string { return &s }
