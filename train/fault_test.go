package train

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// faultConfig is the run the fault tests interrupt: the tiny model, a
// checkpoint after every step (so that kills land in checkpoint writes as
// often as in steps), gradient accumulation and a block-size change, so
// that every kind of state must survive.
func faultConfig(modelDir, out string, steps int) Config {
	c := tinyConfig(modelDir, out)
	c.Steps, c.GradAccum, c.MicroBatch = steps, 2, 2
	c.BlockSchedule = []BlockStage{{0, 2}, {steps / 2, 4}}
	c.CheckpointEvery, c.KeepCheckpoints = 1, 2
	return c
}

func faultSource(t *testing.T) Source { return toySource(t, 6, 24) }

// TestTrainProcess is not a test: it is the training process that
// TestKillResume starts (the test binary itself, so that nothing needs
// building) and kills. It trains as faultConfig says, from the model and
// into the directory given in the environment, handling SIGTERM as
// dllm train does.
func TestTrainProcess(t *testing.T) {
	if os.Getenv("DLLM_TRAIN_PROCESS") != "1" {
		t.Skip("the training process of TestKillResume")
	}
	steps, _ := strconv.Atoi(os.Getenv("DLLM_TRAIN_STEPS"))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	_, err := Run(ctx, faultConfig(os.Getenv("DLLM_TRAIN_MODEL"), os.Getenv("DLLM_TRAIN_OUT"), steps),
		Options{Train: faultSource(t), Resume: os.Getenv("DLLM_TRAIN_RESUME") == "1"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
}

// finalFiles are what must match bit for bit between runs.
var finalFiles = []string{modelWeights, optimizerName}

// TestKillResume kills training with SIGKILL at random moments (in a
// step, in a checkpoint write, while pruning one, now and then while
// loading) and resumes it until it finishes, then checks that the weights
// and AdamW moments are byte for byte those of an uninterrupted run, and
// that no temporary is left. By default two trials of one kill each (a
// process start costs over a second here: libtorch); DLLM_FAULT_TEST=1
// runs twelve trials of one to four kills (DLLM_FAULT_TRIALS sets the
// number). The seed of the kill points is logged.
func TestKillResume(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	trials, maxKills, steps, startupKills := 2, 1, 8, false
	if os.Getenv("DLLM_FAULT_TEST") == "1" {
		trials, maxKills, steps, startupKills = 12, 4, 16, true
		if n, err := strconv.Atoi(os.Getenv("DLLM_FAULT_TRIALS")); err == nil && n > 0 {
			trials = n
		}
	}
	dir := tinyModel(t)
	ref := t.TempDir()
	start := time.Now()
	if _, err := Run(context.Background(), faultConfig(dir, ref, steps), Options{Train: faultSource(t)}); err != nil {
		t.Fatal(err)
	}
	stepTime := time.Since(start) / time.Duration(steps) // a step and its checkpoint
	want := map[string][]byte{}
	for _, f := range finalFiles {
		want[f] = readCheckpointFile(t, ref, steps, f)
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("kill points from seed %d; a step with its checkpoint takes about %v", seed, stepTime.Round(time.Millisecond))
	rng := rand.New(rand.NewPCG(seed, 0))
	inCheckpoint := 0
	for trial := range trials {
		out := t.TempDir()
		var kills []string
		for attempt := 0; ; attempt++ {
			cmd := trainProcess(dir, out, steps, attempt > 0)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var killAt func() bool // reports when to kill
			switch {
			case len(kills) >= 1+rng.IntN(maxKills):
				killAt = func() bool { return false } // this one may finish
			case startupKills && rng.IntN(5) == 0:
				deadline := time.Now().Add(time.Duration(rng.Int64N(int64(time.Second))))
				killAt = func() bool { return time.Now().After(deadline) }
			default:
				// After a random number of further steps, then somewhere in
				// the next step or checkpoint.
				done := metricLines(out)
				target := done + 1 + rng.IntN(max(1, steps-newestStep(out)-1))
				extra := time.Duration(rng.Int64N(int64(stepTime)))
				var reached time.Time
				killAt = func() bool {
					if reached.IsZero() && metricLines(out) >= target {
						reached = time.Now()
					}
					return !reached.IsZero() && time.Since(reached) >= extra
				}
			}
			var err error
			killed := false
		wait:
			for {
				select {
				case err = <-exited:
					break wait
				case <-time.After(time.Millisecond):
					if killAt() {
						cmd.Process.Kill()
						<-exited
						killed = true
						break wait
					}
				}
			}
			if !killed {
				if err != nil {
					t.Fatalf("trial %d, attempt %d: training failed: %v\n%s", trial, attempt, err, stderr.String())
				}
				break
			}
			where := fmt.Sprintf("after step %d", newestStep(out))
			if tmps, _ := filepath.Glob(filepath.Join(out, checkpointsDir, "step-*.tmp-*")); len(tmps) > 0 {
				where += ", writing a checkpoint"
				inCheckpoint++
			}
			kills = append(kills, where)
			if attempt > 20 {
				t.Fatalf("trial %d: not finished after %d attempts (kills %v)", trial, attempt, kills)
			}
		}
		for _, f := range finalFiles {
			if !bytes.Equal(readCheckpointFile(t, out, steps, f), want[f]) {
				t.Errorf("trial %d (killed %v): %s differs from the uninterrupted run's", trial, kills, f)
			}
		}
		for _, pattern := range []string{"*.tmp*", filepath.Join("*", "*.tmp")} {
			if tmps, _ := filepath.Glob(filepath.Join(out, checkpointsDir, pattern)); len(tmps) > 0 {
				t.Errorf("trial %d: temporaries left: %v", trial, tmps)
			}
		}
		t.Logf("trial %d: killed %d times (%s), resumed to identical weights and moments", trial, len(kills), strings.Join(kills, "; "))
	}
	t.Logf("%d trials; %d kills landed in a checkpoint write", trials, inCheckpoint)
}

// metricLines counts the lines of out/metrics.jsonl: one per step taken,
// by every attempt.
func metricLines(out string) int {
	b, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	return bytes.Count(b, []byte{'\n'})
}

// trainProcess is the command that runs TestTrainProcess in a child.
func trainProcess(modelDir, out string, steps int, resume bool) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestTrainProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DLLM_TRAIN_PROCESS=1", "DLLM_TRAIN_MODEL="+modelDir, "DLLM_TRAIN_OUT="+out,
		"DLLM_TRAIN_STEPS="+strconv.Itoa(steps), "DLLM_TRAIN_RESUME="+map[bool]string{true: "1", false: "0"}[resume])
	return cmd
}

// newestStep is the step of the newest finished checkpoint under out (-1:
// none), for the log.
func newestStep(out string) int {
	dirs, _ := listCheckpoints(filepath.Join(out, checkpointsDir))
	if len(dirs) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(dirs[0]), "step-"))
	return n
}

// TestCheckpointWriteFails: a write that fails while a checkpoint is being
// written (each of its files in turn, as a full disk would) stops the run
// with the error, leaves the previous checkpoint valid and nothing of the
// failed one; resuming then ends with the same weights as a run that never
// failed.
func TestCheckpointWriteFails(t *testing.T) {
	dir := tinyModel(t)
	const steps, failAt = 4, 3
	ref := t.TempDir()
	if _, err := Run(context.Background(), faultConfig(dir, ref, steps), Options{Train: faultSource(t)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { failWrite = nil })
	// The first file, a small one and the last: the other small files take
	// the same path as state.json.
	for _, file := range []string{modelWeights, stateName, manifestName} {
		t.Run(file, func(t *testing.T) {
			out := t.TempDir()
			root := filepath.Join(out, checkpointsDir)
			failWrite = func(path string) error {
				if filepath.Base(path) == file && strings.Contains(path, checkpointName(failAt)+".tmp-") {
					return syscall.ENOSPC
				}
				return nil
			}
			_, err := Run(context.Background(), faultConfig(dir, out, steps), Options{Train: faultSource(t)})
			failWrite = nil
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("run: error %v, want the write's ENOSPC", err)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(root, "*.tmp*")); len(leftovers) > 0 {
				t.Errorf("the failed checkpoint left %v", leftovers)
			}
			latest, st, err := LatestCheckpoint(root, func(w string) { t.Errorf("warning: %s", w) })
			if err != nil || st == nil || st.Step != failAt-1 {
				t.Fatalf("newest valid checkpoint %q (%v), want step %d", latest, err, failAt-1)
			}
			if _, err := Run(context.Background(), faultConfig(dir, out, steps), Options{Train: faultSource(t), Resume: true}); err != nil {
				t.Fatal(err)
			}
			for _, f := range finalFiles {
				if !bytes.Equal(readCheckpointFile(t, out, steps, f), readCheckpointFile(t, ref, steps, f)) {
					t.Errorf("%s after the resume differs from the run that never failed", f)
				}
			}
		})
	}
}

// TestCheckpointDiskFull is TestCheckpointWriteFails on a real full disk:
// a 6 MiB tmpfs holds two checkpoints of the tiny model but not a third.
// It needs root (mount) and runs with DLLM_FAULT_TEST=1; it is skipped
// where mounting fails.
func TestCheckpointDiskFull(t *testing.T) {
	if os.Getenv("DLLM_FAULT_TEST") != "1" {
		t.Skip("mounts a tmpfs; set DLLM_FAULT_TEST=1")
	}
	dir := tinyModel(t)
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	const steps = 6
	ref := t.TempDir()
	if _, err := Run(context.Background(), faultConfig(dir, ref, steps), Options{Train: faultSource(t)}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(mnt, "run")
	root := filepath.Join(out, checkpointsDir)
	c := faultConfig(dir, out, steps)
	c.KeepCheckpoints = 3 // the third does not fit
	_, err := Run(context.Background(), c, Options{Train: faultSource(t)})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("run on a full disk: error %v, want ENOSPC", err)
	}
	t.Logf("on a full disk: %v", err)
	if leftovers, _ := filepath.Glob(filepath.Join(root, "*.tmp*")); len(leftovers) > 0 {
		t.Errorf("the failed checkpoint left %v", leftovers)
	}
	latest, st, err := LatestCheckpoint(root, func(w string) { t.Errorf("warning: %s", w) })
	if err != nil || st == nil {
		t.Fatalf("no valid checkpoint after the failure: %q %v", latest, err)
	}
	t.Logf("newest valid checkpoint after the failure: %s", filepath.Base(latest))
	// Room again: the run resumes and ends as if nothing had happened.
	if out, err := exec.Command("mount", "-o", "remount,size=64m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	if _, err := Run(context.Background(), c, Options{Train: faultSource(t), Resume: true}); err != nil {
		t.Fatal(err)
	}
	for _, f := range finalFiles {
		if !bytes.Equal(readCheckpointFile(t, out, steps, f), readCheckpointFile(t, ref, steps, f)) {
			t.Errorf("%s after the resume differs from the run that never failed", f)
		}
	}
}
