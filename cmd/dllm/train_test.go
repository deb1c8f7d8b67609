package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"dllm/data"
	"dllm/diffusion"
	"dllm/model"
	"dllm/torch"
)

// runTrainCmds runs `dllm args...` with the commands train needs.
func runTrainCmds(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.Command{
		Name:      "dllm",
		Writer:    &out,
		ErrWriter: &errOut,
		Commands:  []*cli.Command{convertCommand(), trainCommand(), exportCommand(), inspectCommand(), generateCommand(), serveCommand()},
	}
	err := app.Run(context.Background(), append([]string{"dllm"}, args...))
	return out.String(), errOut.String(), err
}

// TestTrainAndExportCommands: convert the tiny model, train it a few steps
// on synthetic tokens with flags over a config file, then export the
// training directory's newest checkpoint as bf16.
func TestTrainAndExportCommands(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Skip(err)
	}
	tmp := t.TempDir()
	mdir := filepath.Join(tmp, "tiny-dllm")
	if _, _, err := runTrainCmds(t, "convert", "--from", convertFixture, "--out", mdir, "--block-size", "4", "--hash", "fast"); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(tmp, "train.yaml")
	if err := os.WriteFile(cfg, []byte("model: "+mdir+"\ndata: synthetic\nseq_len: 16\nsteps: 100\ndevice: cpu\nthreads: 1\nlr: 1e-3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "run")
	stdout, stderr, err := runTrainCmds(t, "train", "--config", cfg, "--steps", "3", "--out", out, "--block-size", "2", "--set", "micro_batch=2", "--log-every", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "trained to step 3") || !strings.Contains(stderr, "step 3/3") {
		t.Fatalf("stdout %q\nstderr %q", stdout, stderr)
	}
	exp := filepath.Join(tmp, "exported")
	if _, stderr, err := runTrainCmds(t, "export", "--checkpoint", out, "--out", exp, "--dtype", "bf16"); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m, err := model.Load(exp, model.LoadOptions{Device: torch.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	s, err := diffusion.LoadSettings(exp)
	if err != nil || m.DType != torch.BFloat16 || s.BlockSize != 2 || s.MaskTokenID != 500 {
		t.Fatalf("export: dtype %v, settings %+v, %v", m.DType, s, err)
	}
	checkHFShape(t, exp, s.MaskToken)
	// A training output or checkpoint handed where a model directory goes
	// is named for what it is, with what to run instead.
	ckpt := filepath.Join(out, "checkpoints", "step-0000003")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--model", out, "--port", "0"}, out + " is a training output directory, not a model directory: its newest export is " + filepath.Join(out, "model-step-0000003")},
		{[]string{"generate", "--model", out, "--prompt", "hi"}, "its newest export is"},
		{[]string{"inspect", out}, "its newest export is"},
		{[]string{"serve", "--model", ckpt, "--port", "0"}, "is a training checkpoint, not a model directory: make one with dllm export --checkpoint"},
		{[]string{"export", "--checkpoint", out, "--out", exp}, "export: " + exp + " exists"},
	} {
		if _, _, err := runTrainCmds(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "train: export") {
			t.Errorf("%v: %v\nwant %q", c.args, err, c.want)
		}
	}
	if stdout, _, err := runTrainCmds(t, "inspect", ckpt); err != nil || !strings.Contains(stdout, "training checkpoint") || strings.Contains(stdout, "autoregressive") {
		t.Errorf("inspect of a checkpoint: %v\n%s", err, stdout)
	}
	if _, _, err := runTrainCmds(t, "train", "--config", cfg, "--steps", "3", "--out", out); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("training over checkpoints without --resume: %v", err)
	}
	if _, _, err := runTrainCmds(t, "train", "--config", cfg, "--set", "lr_shedule=wsd"); err == nil || !strings.Contains(err.Error(), "lr_shedule") {
		t.Fatalf("misspelt --set key: %v", err)
	}
	// A YAML list arrives whole, commas and all: its second stage is
	// checked (and refused), not cut off at the first comma.
	sched := "block_schedule=[{step: 0, size: 1}, {step: 0, size: 2}]"
	if _, _, err := runTrainCmds(t, "train", "--config", cfg, "--set", sched); err == nil || !strings.Contains(err.Error(), "stage 1 starts at step 0") {
		t.Fatalf("--set %s: %v", sched, err)
	}
}

// TestTrainIncompleteData: training on a data directory whose preparation
// was interrupted is refused, before the model loads, unless the flag or
// the config key allows it.
func TestTrainIncompleteData(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Skip(err)
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	dc := data.DefaultConfig()
	dc.Tokenizer, dc.Out, dc.SeqLen, dc.ShardTokens, dc.Workers = convertFixture, dir, 16, 16*2, 1
	dc.Sources = []data.SourceConfig{{Name: "c", Kind: data.KindText, Paths: []string{"../../testdata/corpus/tiny.jsonl"}}}
	stop := func(int) error { return errors.New("interrupted") }
	if _, err := data.Prepare(context.Background(), data.Options{Config: dc, AfterShard: stop}); err == nil {
		t.Fatal("prepare was not interrupted")
	}
	noModel := filepath.Join(tmp, "no-model")
	base := "model: " + noModel + "\nsteps: 1\ndevice: cpu\ndata:\n  train: " + dir + "\n"
	cfg, allowing := filepath.Join(tmp, "train.yaml"), filepath.Join(tmp, "allowing.yaml")
	for path, text := range map[string]string{cfg: base, allowing: base + "  allow_incomplete: true\n"} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		config  string
		args    []string
		allowed bool
	}{
		{"refused", cfg, nil, false},
		{"flag", cfg, []string{"--allow-incomplete-data"}, true},
		{"--set", cfg, []string{"--set", "data.allow_incomplete=true"}, true},
		{"config file", allowing, nil, true},
		{"flag over the file", allowing, []string{"--allow-incomplete-data=false"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"train", "--config", c.config, "--out", filepath.Join(tmp, c.name)}, c.args...)
			_, stderr, err := runTrainCmds(t, args...)
			if err == nil {
				t.Fatal("trained without a model")
			}
			refused := strings.Contains(err.Error(), "is incomplete") && strings.Contains(err.Error(), "--allow-incomplete-data")
			if refused == c.allowed {
				t.Fatalf("allowed %v, error: %v", c.allowed, err)
			}
			if c.allowed && (!strings.Contains(err.Error(), noModel) || !strings.Contains(stderr, "warning: data "+dir+" is incomplete")) {
				t.Fatalf("allowed: the run should warn, then fail on the model: %v\n%s", err, stderr)
			}
		})
	}
}
