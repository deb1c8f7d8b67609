package train

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"dllm/model"
	"dllm/torch"
)

// distTol is how far the losses of N ranks may be from one process's with
// the same global batch (relative): the ranks sum their gradients in
// another order than one process accumulates them (float32), nothing else
// differs. With two micro-batches on two ranks the sums are the same
// additions and the runs agree bit for bit; TestDistMatchesOneProcess
// logs the largest difference seen.
const distTol = 1e-5

// runRanks trains world ranks of one job in this process, one goroutine
// each, over Gloo on loopback (as separate processes would); cfg gives
// each rank's config, ctx its context.
func runRanks(t *testing.T, world int, cfg func(rank int) Config, o Options, ctx func(rank int) context.Context) ([]*Result, []error) {
	t.Helper()
	if !torch.DistAvailable(torch.Gloo) {
		t.Skip("this shim has no Gloo (apt-get install libgloo-dev, then make shim)")
	}
	port, err := torch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	res := make([]*Result, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := o
			o.Dist = &Dist{Rank: r, World: world, LocalRank: r, Addr: "127.0.0.1", Port: port, Timeout: time.Minute}
			res[r], errs[r] = Run(ctx(r), cfg(r), o)
		}()
	}
	wg.Wait()
	return res, errs
}

func background(int) context.Context { return context.Background() }

// relDiff is the largest relative difference between a and b.
func relDiff(a, b []float64) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(a[i]-b[i])/max(math.Abs(b[i]), 1e-12))
	}
	return d
}

// weightsDiff is the largest difference between two checkpoints' weights,
// each tensor's relative to its largest magnitude (an element near zero
// has no meaningful relative difference of its own).
func weightsDiff(t *testing.T, a, b string) float64 {
	t.Helper()
	load := func(dir string) *model.Model {
		m, err := model.Load(dir, model.LoadOptions{Device: torch.CPU})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ma, mb := load(a), load(b)
	defer ma.Free()
	defer mb.Free()
	pa, pb := namedParams(ma), namedParams(mb)
	d := 0.0
	for i := range pa {
		x, y := torch.ToSlice[float32](pa[i].t), torch.ToSlice[float32](pb[i].t)
		diff, scale := 0.0, 0.0
		for j := range x {
			diff = max(diff, math.Abs(float64(x[j]-y[j])))
			scale = max(scale, math.Abs(float64(y[j])))
		}
		d = max(d, diff/scale)
	}
	return d
}

// TestDistMatchesOneProcess: N ranks sharing a global batch of
// micro_batch x grad_accum sequences train like one process with the same
// config: the same losses and eval losses step by step, the same final
// weights, within distTol; only rank 0 writes anything.
func TestDistMatchesOneProcess(t *testing.T) {
	dir := tinyModel(t)
	src := toySource(t, 12, 24)
	cases := []struct {
		name                  string
		world, accum, microBS int
	}{
		{"2 ranks, 1 micro-batch each", 2, 2, 2},
		{"2 ranks, 2 micro-batches each", 2, 4, 1},
		{"3 ranks", 3, 3, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := func(out string) Config {
				cfg := tinyConfig(dir, out)
				cfg.Steps, cfg.GradAccum, cfg.MicroBatch = 6, c.accum, c.microBS
				cfg.BlockSchedule = []BlockStage{{0, 2}, {3, 4}}
				cfg.EvalEvery, cfg.EvalSeqs = 3, 5 // 3 eval micro-batches of up to 2: shares of 2, 1 and 0
				return cfg
			}
			one := t.TempDir()
			want, err := Run(context.Background(), base(one), Options{Train: src, Eval: src})
			if err != nil {
				t.Fatal(err)
			}
			outs := make([]string, c.world)
			for r := range outs {
				outs[r] = filepath.Join(t.TempDir(), "out")
			}
			res, errs := runRanks(t, c.world, func(r int) Config { return base(outs[r]) }, Options{Train: src, Eval: src}, background)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r, got := range res {
				if d := relDiff(got.Losses, want.Losses); d > distTol || len(got.Losses) != len(want.Losses) {
					t.Errorf("rank %d: losses %v, one process %v (relative difference %.2g)", r, got.Losses, want.Losses, d)
				}
				if d := relDiff([]float64{got.EvalLoss}, []float64{want.EvalLoss}); d > distTol {
					t.Errorf("rank %d: eval loss %v, one process %v", r, got.EvalLoss, want.EvalLoss)
				}
			}
			d := weightsDiff(t, res[0].Checkpoint, want.Checkpoint)
			if d > distTol {
				t.Errorf("final weights differ from one process's by %.2g (relative to each tensor's largest)", d)
			}
			t.Logf("largest relative difference from one process: losses %.2g, weights %.2g", relDiff(res[0].Losses, want.Losses), d)
			for r := 1; r < c.world; r++ {
				if _, err := os.Stat(outs[r]); !os.IsNotExist(err) || res[r].Checkpoint != "" {
					t.Errorf("rank %d wrote %s (checkpoint %q)", r, outs[r], res[r].Checkpoint)
				}
			}
		})
	}
}

// TestDistResumeOnOtherN: a run interrupted at step 3 (on rank 0 only: the
// ranks agree to stop together) and resumed on another number of ranks
// continues with the same data, noise and losses as a run never
// interrupted, whichever way N changes.
func TestDistResumeOnOtherN(t *testing.T) {
	dir := tinyModel(t)
	src := toySource(t, 12, 24)
	const steps = 6
	base := func(out string) Config {
		cfg := tinyConfig(dir, out)
		cfg.Steps, cfg.GradAccum, cfg.MicroBatch = steps, 2, 2
		cfg.CheckpointEvery = 100 // only the interruption and the end
		return cfg
	}
	straight, err := Run(context.Background(), base(t.TempDir()), Options{Train: src})
	if err != nil {
		t.Fatal(err)
	}
	// run trains on world ranks (one: plain Run), interrupting rank 0
	// after step stopAt when it is not 0.
	run := func(out string, world, stopAt int, resume bool) ([]float64, error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		o := Options{Train: src, Resume: resume}
		if stopAt > 0 {
			o.afterStep = func(step int) {
				if step == stopAt {
					cancel()
				}
			}
		}
		if world == 1 {
			res, err := Run(ctx, base(out), o)
			if err != nil {
				return nil, err
			}
			return res.Losses, nil
		}
		res, errs := runRanks(t, world, func(int) Config { return base(out) }, o, func(r int) context.Context {
			if r == 0 {
				return ctx
			}
			return context.Background()
		})
		for r := 1; r < world; r++ {
			if (errs[r] == nil) != (errs[0] == nil) {
				return nil, fmt.Errorf("rank %d: %v; rank 0: %v", r, errs[r], errs[0])
			}
		}
		if errs[0] != nil {
			return nil, errs[0]
		}
		return res[0].Losses, nil
	}
	for _, c := range []struct{ first, then int }{{2, 1}, {1, 2}} {
		t.Run(fmt.Sprintf("%d then %d ranks", c.first, c.then), func(t *testing.T) {
			out := t.TempDir()
			if _, err := run(out, c.first, 3, false); err == nil || !strings.Contains(err.Error(), "interrupted after step 3") {
				t.Fatalf("%d rank(s), interrupted: %v", c.first, err)
			}
			losses, err := run(out, c.then, 0, true)
			if err != nil {
				t.Fatalf("resumed on %d rank(s): %v", c.then, err)
			}
			if d := relDiff(losses, straight.Losses[3:]); d > distTol || len(losses) != steps-3 {
				t.Errorf("%d then %d rank(s): losses after the resume %v, uninterrupted %v", c.first, c.then, losses, straight.Losses[3:])
			}
		})
	}
}

// TestDistStartFailures: a config that cannot split its batch fails on
// every rank before the group forms, and rank 0's failure to start reaches
// the other ranks at once, not after the timeout.
func TestDistStartFailures(t *testing.T) {
	dir := tinyModel(t)
	src := toySource(t, 4, 16)
	t.Run("grad_accum not a multiple of the ranks", func(t *testing.T) {
		_, errs := runRanks(t, 2, func(int) Config {
			c := tinyConfig(dir, t.TempDir())
			c.GradAccum = 3
			return c
		}, Options{Train: src}, background)
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "grad_accum 3 is not a multiple of the 2 ranks") {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
	t.Run("rank 0 refuses an output with checkpoints", func(t *testing.T) {
		out := t.TempDir()
		c := tinyConfig(dir, out)
		c.Steps, c.GradAccum = 1, 2
		if _, err := Run(context.Background(), c, Options{Train: src}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, errs := runRanks(t, 2, func(int) Config { return c }, Options{Train: src}, background)
		if errs[0] == nil || !strings.Contains(errs[0].Error(), "already holds checkpoints") {
			t.Errorf("rank 0: %v", errs[0])
		}
		if errs[1] == nil || !strings.Contains(errs[1].Error(), "rank 0 could not start") {
			t.Errorf("rank 1: %v", errs[1])
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("took %v", d)
		}
	})
}

func TestDistFromEnv(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want *Dist // nil with wantErr "": alone
		err  string
	}{
		{"alone", map[string]string{}, nil, ""},
		{"world of one", map[string]string{"WORLD_SIZE": "1", "RANK": "0"}, nil, ""},
		{"launcher's child", map[string]string{"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},
			&Dist{Rank: 3, World: 4, LocalRank: 1, Addr: "10.0.0.1", Port: 29500}, ""},
		{"torchrun's agent store", map[string]string{"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1",
			"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "2"},
			&Dist{World: 2, Addr: "h", Port: 1, AgentStore: true, Prefix: "/worker/attempt_2"}, ""},
		{"no address", map[string]string{"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "1"}, nil, "MASTER_ADDR unset"},
		{"bad rank", map[string]string{"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, nil, "RANK 2 of WORLD_SIZE 2"},
		{"bad number", map[string]string{"WORLD_SIZE": "two", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, nil, `WORLD_SIZE="two"`},
	}
	vars := []string{"WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "DLLM_FAULT_EXIT"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, v := range vars {
				t.Setenv(v, c.env[v])
			}
			got, err := DistFromEnv(time.Minute)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.want != nil {
				c.want.Timeout = time.Minute
			}
			if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
