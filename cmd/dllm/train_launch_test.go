package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"dllm/torch"
)

// TestMain lets the launch tests start ranks from this test binary: with
// DLLM_TEST_MAIN=1 it is dllm itself.
func TestMain(m *testing.M) {
	if os.Getenv("DLLM_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// launchSetup converts the tiny model and writes a CPU config for it with
// grad_accum 2 (one micro-batch per rank of two); it makes this test binary
// the dllm that the launch starts.
func launchSetup(t *testing.T) (cfg, out string) {
	t.Helper()
	if err := torch.Load(); err != nil {
		t.Skip(err)
	}
	if !torch.DistAvailable(torch.Gloo) {
		t.Skip("this shim has no Gloo (apt-get install libgloo-dev, then make shim)")
	}
	t.Setenv("DLLM_TEST_MAIN", "1")
	tmp := t.TempDir()
	mdir := filepath.Join(tmp, "tiny-dllm")
	if _, _, err := runTrainCmds(t, "convert", "--from", convertFixture, "--out", mdir, "--block-size", "4", "--hash", "fast"); err != nil {
		t.Fatal(err)
	}
	cfg = filepath.Join(tmp, "train.yaml")
	yaml := "model: " + mdir + "\ndata: synthetic\nseq_len: 16\ndevice: cpu\nthreads: 1\nlr: 1e-3\nmicro_batch: 2\ngrad_accum: 2\nblock_schedule: [{step: 0, size: 2}]\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, filepath.Join(tmp, "run")
}

// TestTrainLaunch: `dllm train --nproc 2` starts two ranks that train
// together; rank 0 alone reports, checkpoints and exports.
func TestTrainLaunch(t *testing.T) {
	cfg, out := launchSetup(t)
	stdout, stderr, err := runTrainCmds(t, "train", "--config", cfg, "--nproc", "2", "--steps", "3", "--out", out, "--log-every", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if strings.Count(stdout, "trained to step 3") != 1 || !strings.Contains(stderr, "data parallel: 2 ranks (gloo)") ||
		strings.Contains(stderr, "[rank 1]") {
		t.Fatalf("stdout %q\nstderr %q", stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "checkpoints", "step-0000003", "manifest.json")); err != nil {
		t.Fatal(err)
	}
}

func TestTrainLaunchArguments(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "train.yaml")
	if err := os.WriteFile(cfg, []byte("model: m\ndata: synthetic\nseq_len: 16\nsteps: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		env  string // WORLD_SIZE
		want string
	}{
		{[]string{"--nnodes", "2"}, "", "needs --master-addr"},
		{[]string{"--nproc", "2", "--nnodes", "2", "--node-rank", "2", "--master-addr", "h"}, "", "0 <= node-rank < nnodes"},
		{[]string{"--nproc", "0"}, "", "want at least one"},
		{[]string{"--nproc", "2"}, "2", "torchrun starts the ranks itself"},
		{[]string{}, "2", "MASTER_ADDR unset"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " ")+" WORLD_SIZE="+c.env, func(t *testing.T) {
			t.Setenv("WORLD_SIZE", c.env)
			_, _, err := runTrainCmds(t, append([]string{"train", "--config", cfg}, c.args...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestLineWriter(t *testing.T) {
	cases := []struct {
		writes       []string
		prefix, want string
		last         string
	}{
		{[]string{"a\nb", "c\n"}, "[rank 1] ", "[rank 1] a\n[rank 1] bc\n", "bc"},
		{[]string{"step 1\rstep 2\n", "\n"}, "", "step 2\n\n", "step 2"},
		{[]string{"dllm: boom"}, "[rank 2] ", "[rank 2] dllm: boom\n", "dllm: boom"}, // flushed unfinished
	}
	for _, c := range cases {
		var b bytes.Buffer
		w := &lineWriter{w: &b, prefix: c.prefix, mu: &sync.Mutex{}}
		for _, s := range c.writes {
			w.Write([]byte(s))
		}
		w.flush()
		if b.String() != c.want || w.last != c.last {
			t.Errorf("%q: wrote %q (last %q), want %q (last %q)", c.writes, b.String(), w.last, c.want, c.last)
		}
	}
}
