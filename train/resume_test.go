package train

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readCheckpointFile(t *testing.T, out string, step int, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, checkpointsDir, checkpointName(step), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestResumeIsExact: N steps straight and N/2 + resume + N/2 give the same
// weights and optimizer moments, bit for bit (CPU, float32), through data
// shuffling, complementary noise and gradient accumulation, with and
// without distillation (the teacher is reloaded, never checkpointed).
func TestResumeIsExact(t *testing.T) {
	dir := tinyModel(t)
	src := toySource(t, 6, 24)
	const N = 8
	for _, tc := range []struct {
		name string
		edit func(c *Config)
	}{
		{"block", func(c *Config) {}},
		{"block-distill", func(c *Config) { c.Distill.Weight, c.Distill.Temperature = 0.5, 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) { testResumeIsExact(t, dir, src, N, tc.edit) })
	}
}

func testResumeIsExact(t *testing.T, dir string, src Source, N int, edit func(c *Config)) {
	base := func(out string) Config {
		c := tinyConfig(dir, out)
		c.Steps, c.GradAccum, c.MicroBatch = N, 2, 2
		c.BlockSchedule = []BlockStage{{0, 2}, {5, 4}}
		c.CheckpointEvery = 100 // only the interruption and the end
		edit(&c)
		return c
	}
	straight := t.TempDir()
	if _, err := Run(context.Background(), base(straight), Options{Train: src}); err != nil {
		t.Fatal(err)
	}

	split := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Run(ctx, base(split), Options{Train: src, afterStep: func(step int) {
		if step == N/2 {
			cancel()
		}
	}})
	if err == nil || !strings.Contains(err.Error(), "interrupted after step 4") {
		t.Fatalf("interrupted run: error %v", err)
	}
	// A fresh run into the same directory is refused; a resumed one goes on.
	if _, err := Run(context.Background(), base(split), Options{Train: src}); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("fresh run over checkpoints: error %v, want a refusal naming --resume", err)
	}
	res, err := Run(context.Background(), base(split), Options{Train: src, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.State.Step != N || len(res.Losses) != N/2 {
		t.Fatalf("resumed run ended at step %d after %d steps", res.State.Step, len(res.Losses))
	}
	for _, f := range []string{modelWeights, optimizerName} {
		if !bytes.Equal(readCheckpointFile(t, straight, N, f), readCheckpointFile(t, split, N, f)) {
			t.Errorf("%s differs between the straight and the resumed run", f)
		}
	}
	a, _ := VerifyCheckpoint(filepath.Join(straight, checkpointsDir, checkpointName(N)))
	b, _ := VerifyCheckpoint(filepath.Join(split, checkpointsDir, checkpointName(N)))
	if a.TokensSeen != b.TokensSeen || a.DataPosition != b.DataPosition || !bytes.Equal(a.RNG, b.RNG) || a.AdamSteps != b.AdamSteps {
		t.Errorf("states differ: %+v vs %+v", a, b)
	}
}

func TestCheckpointCorruptionDetected(t *testing.T) {
	dir := tinyModel(t)
	out := t.TempDir()
	c := tinyConfig(dir, out)
	c.Steps, c.CheckpointEvery, c.KeepCheckpoints = 6, 2, 2
	if _, err := Run(context.Background(), c, Options{Train: toySource(t, 4, 16)}); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(out, checkpointsDir)
	dirs, _ := listCheckpoints(root)
	if len(dirs) != 2 || filepath.Base(dirs[0]) != "step-0000006" || filepath.Base(dirs[1]) != "step-0000004" {
		t.Fatalf("kept checkpoints %v, want steps 6 and 4", dirs)
	}
	// Flip one byte of the newest weights.
	path := filepath.Join(dirs[0], modelWeights)
	b, _ := os.ReadFile(path)
	b[len(b)-3] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyCheckpoint(dirs[0]); err == nil || !strings.Contains(err.Error(), "model.safetensors is corrupt") {
		t.Fatalf("verify: error %v, want model.safetensors is corrupt", err)
	}
	if err := Export(dirs[0], filepath.Join(t.TempDir(), "m"), ExportOptions{}); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("export of a corrupt checkpoint: error %v", err)
	}
	// Resuming refuses it (keeping it aside) and continues from step 4.
	var warned []string
	got, st, err := LatestCheckpoint(root, func(s string) { warned = append(warned, s) })
	if err != nil || filepath.Base(got) != "step-0000004" || st.Step != 4 {
		t.Fatalf("latest valid checkpoint %s (%v), want step-0000004", got, err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "corrupt") {
		t.Fatalf("warnings %q, want one about the corrupt checkpoint", warned)
	}
	aside, _ := filepath.Glob(filepath.Join(root, "step-0000006.corrupt-*"))
	if len(aside) != 1 {
		t.Fatalf("the corrupt checkpoint was not kept aside: %v", aside)
	}
	// A missing file is caught as well.
	os.Remove(filepath.Join(got, stateName))
	if _, err := VerifyCheckpoint(got); err == nil {
		t.Fatal("a checkpoint without state.json verified")
	}
}
