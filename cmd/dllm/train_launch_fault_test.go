//go:build dllm_fault

package main

import (
	"strings"
	"testing"
	"time"
)

// TestTrainLaunchRankFails: when rank 1 dies after step 2 (injected with
// DLLM_FAULT_EXIT), the launch ends rank 0 and fails naming rank 1, in
// seconds, not after the collective timeout.
func TestTrainLaunchRankFails(t *testing.T) {
	cfg, out := launchSetup(t)
	t.Setenv("DLLM_FAULT_EXIT", "1:2")
	start := time.Now()
	stdout, stderr, err := runTrainCmds(t, "train", "--config", cfg, "--nproc", "2", "--steps", "1000", "--out", out,
		"--no-checkpoint", "--dist-timeout", "10m")
	if err == nil || !strings.Contains(err.Error(), "rank 1 failed: exit status 3") || !strings.Contains(err.Error(), "injected fault") {
		t.Fatalf("error %v, want rank 1's failure\nstdout %q\nstderr %q", err, stdout, stderr)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("the launch took %v to end", d)
	}
	if !strings.Contains(stderr, "[rank 1] train: rank 1: injected fault") || strings.Contains(stdout, "trained to step") {
		t.Fatalf("stdout %q\nstderr %q", stdout, stderr)
	}
	t.Log(err)
}
