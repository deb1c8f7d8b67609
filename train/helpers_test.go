package train

import (
	"os"
	"path/filepath"
	"testing"

	"dllm/diffusion"
	"dllm/torch"
)

// tinyMaskID is the mask id of the test model: a padded row of the tiny
// model's 512 (the tokenizer defines 505).
const tinyMaskID = 511

// tinyModel makes a dllm model directory from testdata/tiny-llama (3
// layers, hidden 64, vocab 512, float32): links to its files plus a
// dllm.json with the weights' sums.
func tinyModel(t *testing.T) string {
	t.Helper()
	if err := torch.Load(); err != nil {
		t.Skip(err)
	}
	src, err := filepath.Abs("../testdata/tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	// The sums a converted model would carry.
	s := diffusion.NewSettings(tinyMaskID, diffusion.DefaultMaskToken, 4, true)
	s.WeightsSHA256 = map[string]string{"model.safetensors": sha256File(t, filepath.Join(src, "model.safetensors"))}
	if err := s.Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// toySource is n sequences of a repeating 8-token pattern, each starting at
// a different phase, L tokens long.
func toySource(t *testing.T, n, L int) Source {
	t.Helper()
	var toks [][]int64
	for i := 0; i < n; i++ {
		seq := make([]int64, L)
		for j := range seq {
			seq[j] = int64(20 + (i+j)%8)
		}
		toks = append(toks, seq)
	}
	src, err := NewMemorySource(toks, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// tinyConfig is a fast CPU config over the tiny model.
func tinyConfig(modelDir, out string) Config {
	c := DefaultConfig()
	c.Model = modelDir
	c.Data.Train = "memory"
	c.Out = out
	c.Device = "cpu"
	c.DType = "f32"
	c.Threads = 1 // tiny ops: more threads only spin on a shared CPU
	c.Steps = 30
	c.MicroBatch = 4
	c.LR = 3e-3
	c.MinLR = 3e-4
	c.WarmupSteps = 3
	c.BlockSchedule = []BlockStage{{Step: 0, Size: 4}}
	c.CheckpointEvery = 0
	c.EvalEvery = 0
	c.LogEvery = 0
	c.Export = false
	return c
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
