package scripts

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestProxyShippedTeacher runs `make proxy`'s path of scripts/proxy.sh in
// miniature: the second task set's data (a few problems per task), the
// shipped CPU teacher (models/proxy-teacher) converted instead of trained,
// a diffusion run whose steps come from BUDGET and the teacher's token
// count, and both models scored on the held-out split. The shipped
// teacher must still know the tasks.
func TestProxyShippedTeacher(t *testing.T) {
	root := scriptRoot(t, "curl", "awk")
	out := t.TempDir()
	// 0.05% of the teacher's 52.4M tokens is 6 steps of 16 x 256.
	log := runProxy(t, root, "TASKS=v2", "TEACHER=models/proxy-teacher", "BUDGET=0.05",
		"TRAIN=200", "DEV=10", "HELDOUT=10", "TEXT=50", "PROXY_OUT="+out)
	if !regexp.MustCompile(`train: block objective, 6 steps from 0`).MatchString(log) {
		t.Errorf("the diffusion run is not BUDGET's 6 steps:\n%s", log)
	}
	if regexp.MustCompile(`train: ar objective`).MatchString(log) {
		t.Errorf("a teacher was trained although TEACHER was given:\n%s", log)
	}
	if !regexp.MustCompile(`proxy: teacher 52428800 tokens, diffusion 24576 tokens`).MatchString(log) {
		t.Errorf("the summary does not give the shipped teacher's and BUDGET's tokens:\n%s", log)
	}
	if !regexp.MustCompile(`proxy: the teacher (passes the gate \(0\.9 on every family, heldout split\)|is under the gate of 0\.9: .* \(heldout split\))`).MatchString(log) {
		t.Errorf("the summary does not say whether the teacher passes the gate:\n%s", log)
	}
	for _, f := range []string{"teacher-heldout.json", "diffusion-heldout.json"} {
		var r struct {
			Overall struct {
				N        int     `json:"n"`
				Accuracy float64 `json:"accuracy"`
			} `json:"overall"`
		}
		raw, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if r.Overall.N != 50 {
			t.Errorf("%s scored %d questions, want 50 (10 per task)", f, r.Overall.N)
		}
		// The shipped teacher knows every family at 0.91-1.00 (docs/proxy.md).
		if f == "teacher-heldout.json" && r.Overall.Accuracy < 0.8 {
			t.Errorf("the shipped teacher answers %.2f of the held-out questions, want at least 0.8", r.Overall.Accuracy)
		}
	}
}

// TestProxyResumesTeacher stops a teacher's training between checkpoints
// (its checkpoint of step 4 and its export are removed, as if it had been
// stopped after step 2) and runs scripts/proxy.sh again with KEEP=1: the
// teacher goes on from step 2 instead of starting over.
func TestProxyResumesTeacher(t *testing.T) {
	root := scriptRoot(t, "curl")
	out := t.TempDir()
	env := []string{"TRAIN=100", "DEV=5", "HELDOUT=5", "TEXT=20", "DIFF_RUN=none", "EVAL_ON=none",
		"TEACHER_SET=steps=4 checkpoint_every=2 keep_checkpoints=2", "PROXY_OUT=" + out}
	runProxy(t, root, env...)
	run := filepath.Join(out, "teacher-run")
	stopAtStep2(t, run)
	log := runProxy(t, root, append(env, "KEEP=1")...)
	if !regexp.MustCompile(`(?m)^proxy: teacher: resuming .*\n(.*\n)*train: ar objective, 4 steps from 2,`).MatchString(log) {
		t.Errorf("the teacher did not go on from its checkpoint of step 2:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(run, "model-step-0000004", "train.json")); err != nil {
		t.Errorf("the resumed teacher was not exported: %v", err)
	}
}

// TestProxyResumesDiffusion does the same to a diffusion run: stopped
// after step 2 of 4, it goes on from there with KEEP=1 instead of being
// removed and started over (a conversion of the CPU size takes an hour).
func TestProxyResumesDiffusion(t *testing.T) {
	root := scriptRoot(t, "curl")
	out := t.TempDir()
	env := []string{"TASKS=v2", "TEACHER=models/proxy-teacher", "TRAIN=100", "DEV=5", "HELDOUT=5", "TEXT=20",
		"EVAL_ON=none", "DIFF_RUN=diffusion-b5", "DIFF_SET=steps=4 checkpoint_every=2 keep_checkpoints=2",
		"PROXY_OUT=" + out}
	runProxy(t, root, env...)
	run := filepath.Join(out, "diffusion-b5")
	stopAtStep2(t, run)
	log := runProxy(t, root, append(env, "KEEP=1")...)
	if !regexp.MustCompile(`(?m)^proxy: diffusion: resuming .*\n(.*\n)*train: block objective, 4 steps from 2,`).MatchString(log) {
		t.Errorf("the diffusion run did not go on from its checkpoint of step 2:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(run, "model-step-0000004", "train.json")); err != nil {
		t.Errorf("the resumed diffusion model was not exported: %v", err)
	}
}

// stopAtStep2 makes a finished 4-step training run in run look stopped
// after step 2: its export and its checkpoint of step 4 are removed.
func stopAtStep2(t *testing.T, run string) {
	t.Helper()
	for _, p := range []string{"model-step-0000004", "checkpoints/step-0000004"} {
		if err := os.RemoveAll(filepath.Join(run, p)); err != nil {
			t.Fatal(err)
		}
	}
}

// runProxy runs scripts/proxy.sh from root with env added (and free
// ports) and returns its output.
func runProxy(t *testing.T, root string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "scripts/proxy.sh")
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), env...), "PORT="+freePorts(t))
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("proxy.sh %v: %v\n%s", env, err, b)
	}
	return string(b)
}

// freePorts returns the first of two consecutive free local ports
// (scripts/proxy.sh serves the teacher on PORT and the diffusion model on
// PORT+1).
func freePorts(t *testing.T) string {
	t.Helper()
	for range 50 {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := a.Addr().(*net.TCPAddr).Port
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1))
		a.Close()
		if err == nil {
			b.Close()
			return fmt.Sprint(p)
		}
	}
	t.Fatal("no two consecutive free ports")
	return ""
}
