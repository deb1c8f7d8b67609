// Package scripts holds the repository's shell scripts; its test runs the
// MiniCPM5-2B recipe script end to end in rehearsal mode.
package scripts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRecipeRehearsal runs scripts/minicpm5-2b.sh --rehearsal on the tiny
// test model (every stage: both conversions, distillation from a local
// dllm serve decoding four requests at once, data preparation, both training stages, export, the quick
// eval) into a temporary work directory, then runs it again and expects
// every stage to be skipped as done. It builds bin/dllm with make first.
func TestRecipeRehearsal(t *testing.T) {
	root := scriptRoot(t, "curl")
	out := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", append([]string{"scripts/minicpm5-2b.sh", "--rehearsal", "--no-serve",
			"--out", out}, args...)...)
		cmd.Dir = root
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("minicpm5-2b.sh %v: %v\n%s", args, err, b)
		}
		return string(b)
	}

	// 1. From nothing (an empty directory; --fresh only clears out/...):
	// every stage runs and says how long it took.
	first := run()
	if !strings.Contains(first, "rehearsal complete") {
		t.Fatalf("no 'rehearsal complete' line:\n%s", first)
	}
	for _, stage := range []string{"convert", "distill", "prepare", "train1", "train2", "export", "eval"} {
		if !regexp.MustCompile(`(?m)^minicpm5-2b:\s+` + stage + ` took \d+ s`).MatchString(first) {
			t.Errorf("stage %s did not report its time:\n%s", stage, first)
		}
	}
	// The local teacher decodes the distillation's requests together.
	if !regexp.MustCompile(`serve .*--served-model-name teacher --max-num-seqs 4`).MatchString(first) {
		t.Errorf("the local teacher was not served batching four requests:\n%s", first)
	}
	for _, f := range []string{"minicpm5-2b-final/dllm.json", "minicpm5-2b-final/model.safetensors", "minicpm5-2b-eval/diffusion.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("the rehearsal left no %s: %v", f, err)
		}
	}

	// 2. Again: every stage is found done and skipped.
	again := run()
	if n := strings.Count(again, "done already"); n < 7 {
		t.Errorf("the rerun skipped %d stages, want 7:\n%s", n, again)
	}
	if strings.Contains(again, " took ") && regexp.MustCompile(`(?m)^train: step`).MatchString(again) {
		t.Errorf("the rerun trained again:\n%s", again)
	}
}
