package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"dllm/diffusion"
	"dllm/model"
)

// sha256File is the hex sha256 of a file.
func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// writeCheckpoint makes a checkpoint by hand from tiny-llama's float32
// weights, so Export can be tested without libtorch. Its settings carry
// the sums of other weights files, as a run started from a converted model
// could have them.
func writeCheckpoint(t *testing.T) string {
	t.Helper()
	src := "../testdata/tiny-llama"
	dir := t.TempDir()
	weights, err := os.ReadFile(filepath.Join(src, modelWeights))
	if err != nil {
		t.Fatal(err)
	}
	modelConfig, err := os.ReadFile(filepath.Join(src, modelConfigName))
	if err != nil {
		t.Fatal(err)
	}
	s := diffusion.NewSettings(tinyMaskID, diffusion.DefaultMaskToken, 4, true)
	s.WeightsSHA256 = map[string]string{"model-00001-of-00002.safetensors": strings.Repeat("0", 64)}
	settings, _ := jsonMarshal(s)
	abs, _ := filepath.Abs(src)
	state, _ := json.Marshal(State{Step: 3, BlockSize: 4, SourceModel: abs})
	cfg := DefaultConfig()
	files := map[string][]byte{modelWeights: weights, optimizerName: weights, stateName: state,
		trainConfigName: cfg.YAML(), settingsName: settings, modelConfigName: modelConfig}
	man := checkpointManifest{Format: checkpointFormat, Step: 3, Files: map[string]string{}}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		man.Files[name] = sha256File(t, filepath.Join(dir, name))
	}
	b, _ := json.Marshal(man)
	if err := os.WriteFile(filepath.Join(dir, manifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestExportRecordsWeightSums: the exported dllm.json records the sha256
// of the weights file written, in every dtype, replacing whatever sums the
// checkpoint's settings carried, and the export passes VerifyWeights.
func TestExportRecordsWeightSums(t *testing.T) {
	ckpt := writeCheckpoint(t)
	for _, dtype := range []string{"auto", "bf16", "f16", "f32"} {
		t.Run(dtype, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m")
			if err := Export(ckpt, out, ExportOptions{DType: dtype}); err != nil {
				t.Fatal(err)
			}
			s, err := diffusion.LoadSettings(out)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{modelWeights: sha256File(t, filepath.Join(out, modelWeights))}
			if !reflect.DeepEqual(s.WeightsSHA256, want) {
				t.Errorf("weights_sha256 %v, want %v", s.WeightsSHA256, want)
			}
			if err := model.VerifyWeights(context.Background(), out, s.WeightsSHA256); err != nil {
				t.Error(err)
			}
		})
	}
}

// DirHint names training outputs and checkpoints, and nothing else.
func TestDirHint(t *testing.T) {
	out := t.TempDir()
	if h := DirHint(out); h != "" {
		t.Errorf("an empty directory: %q", h)
	}
	if err := os.MkdirAll(filepath.Join(out, checkpointsDir, "step-0000002"), 0o755); err != nil {
		t.Fatal(err)
	}
	if h := DirHint(out); !strings.Contains(h, "with no exported model: make one with dllm export --checkpoint "+out) {
		t.Errorf("checkpoints only: %q", h)
	}
	for _, d := range []string{"model-step-0000001", "model-step-0000002"} {
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if h := DirHint(out); !strings.HasSuffix(h, "its newest export is "+filepath.Join(out, "model-step-0000002")) {
		t.Errorf("with exports: %q", h)
	}
	ck := filepath.Join(out, checkpointsDir, "step-0000002")
	for _, f := range []string{stateName, optimizerName} {
		if err := os.WriteFile(filepath.Join(ck, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if h := DirHint(ck); !strings.Contains(h, "is a training checkpoint") {
		t.Errorf("a checkpoint: %q", h)
	}
}
