package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"dllm/train"
)

func trainCommand() *cli.Command {
	return &cli.Command{
		Name:      "train",
		Usage:     "continue training a converted model as a block-diffusion LM",
		UsageText: "dllm train --config configs/train/NAME.yaml [--resume] [--steps N] [--out DIR] [--device cuda] [options]",
		// Each --set is one value: its YAML may hold commas (lists, mappings).
		DisableSliceFlagSeparator: true,
		Description: `Trains the model of the config's "model" directory (dllm convert's output)
with the config's objective: block (block diffusion in the noisy+clean
layout, the default), ar (next-token baseline) or mdm (full-sequence masked
diffusion). Options come from the built-in defaults, then --config (unknown
keys are errors), then flags.

Data directories of dllm data prepare are checked first: one whose
preparation has not finished or whose shards are missing or damaged is
refused (run the same prepare command again to finish it) unless
--allow-incomplete-data.

Writes OUT/metrics.jsonl, a checkpoint every checkpoint_every steps in
OUT/checkpoints/step-NNNNNNN/ (weights, optimizer, RNG and data position,
sha256 manifest; the newest keep_checkpoints are kept) and at the end a
servable model directory OUT/model-step-NNNNNNN. Ctrl-C finishes the step
in progress, writes a checkpoint and stops; --resume continues from the
newest valid checkpoint exactly as if never interrupted.
See docs/training.md.

--nproc N trains data-parallel on N processes of this machine, one per GPU
(NCCL; Gloo with --device cpu): each computes its share of every step's
micro_batch x grad_accum sequences (N must divide grad_accum), so the maths
and the checkpoints are those of one process, and a run resumes on any N.
--nnodes, --node-rank and --master-addr/--master-port run one such launch
per machine; torchrun can start the ranks instead (its RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT are read). See docs/distributed.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "training config `FILE` (configs/train/*.yaml)", Required: true},
			&cli.BoolFlag{Name: "resume", Usage: "continue from the newest valid checkpoint in OUT/checkpoints"},
			&cli.IntFlag{Name: "steps", Usage: "optimizer steps (overrides steps)"},
			&cli.StringFlag{Name: "out", Usage: "output `DIR` (overrides out)"},
			&cli.StringFlag{Name: "device", Usage: "auto, cpu, cuda or cuda:N (overrides device)"},
			&cli.StringFlag{Name: "dtype", Usage: "compute dtype: auto, f32 or bf16 (overrides dtype)"},
			&cli.StringFlag{Name: "model", Usage: "model `DIR` to start from (overrides model)"},
			&cli.StringFlag{Name: "data", Usage: "training data `DIR` from dllm data prepare, or synthetic (overrides data.train)"},
			&cli.BoolFlag{Name: "synthetic", Usage: "train on random tokens (speed runs; needs seq_len)"},
			&cli.BoolFlag{Name: "allow-incomplete-data", Usage: "train on the good shards of data whose preparation has not finished or whose shards are missing or damaged (sets data.allow_incomplete)"},
			&cli.IntFlag{Name: "seq-len", Usage: "tokens per sequence (overrides seq_len)"},
			&cli.IntFlag{Name: "micro-batch", Usage: "sequences per forward (overrides micro_batch)"},
			&cli.IntFlag{Name: "grad-accum", Usage: "micro-batches per step (overrides grad_accum)"},
			&cli.FloatFlag{Name: "lr", Usage: "peak learning rate (overrides lr)"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of data order, noise and random init (overrides seed)"},
			&cli.IntFlag{Name: "block-size", Usage: "one block size for the whole run (replaces block_schedule)"},
			&cli.StringFlag{Name: "init", Usage: "pretrained or random (overrides init)"},
			&cli.StringFlag{Name: "model-config", Usage: "config.json `FILE` fixing the shape for --init random"},
			&cli.IntFlag{Name: "log-every", Usage: "log line every N steps when not on a terminal (overrides log_every)"},
			&cli.BoolFlag{Name: "no-checkpoint", Usage: "write no checkpoint at all (speed runs; implies --no-export)"},
			&cli.BoolFlag{Name: "no-export", Usage: "do not write a model directory at the end"},
			&cli.StringSliceFlag{Name: "set", Usage: "override any config key: `KEY=VALUE` (YAML value; data.eval=DIR for nested keys); repeatable, applied last"},
			&cli.IntFlag{Name: "nproc", Value: 1, Usage: "data-parallel processes (ranks) to start on this machine, one per GPU"},
			&cli.IntFlag{Name: "nnodes", Value: 1, Usage: "machines in the data-parallel job, each running its own --nproc launch"},
			&cli.IntFlag{Name: "node-rank", Usage: "this machine's place among --nnodes (0: the one at --master-addr)"},
			&cli.StringFlag{Name: "master-addr", Value: "127.0.0.1", Usage: "address of node 0, where rank 0 hosts the rendezvous store"},
			&cli.IntFlag{Name: "master-port", Usage: "the rendezvous store's port (0: a free one on one machine, 29500 across machines)"},
			&cli.DurationFlag{Name: "dist-timeout", Value: train.DefaultDistTimeout, Usage: "bound on the rendezvous and every collective: a rank that does not take part fails the others after it"},
		},
		Action: runTrain,
	}
}

func runTrain(ctx context.Context, c *cli.Command) error {
	cfg := train.DefaultConfig()
	if err := cfg.Load(c.String("config")); err != nil {
		return err
	}
	for name, set := range map[string]func(){
		"steps":                 func() { cfg.Steps = c.Int("steps") },
		"out":                   func() { cfg.Out = c.String("out") },
		"device":                func() { cfg.Device = c.String("device") },
		"dtype":                 func() { cfg.DType = c.String("dtype") },
		"model":                 func() { cfg.Model = c.String("model") },
		"data":                  func() { cfg.Data.Train = c.String("data") },
		"synthetic":             func() { cfg.Data.Train = train.Synthetic },
		"allow-incomplete-data": func() { cfg.Data.AllowIncomplete = c.Bool("allow-incomplete-data") },
		"seq-len":               func() { cfg.SeqLen = c.Int("seq-len") },
		"micro-batch":           func() { cfg.MicroBatch = c.Int("micro-batch") },
		"grad-accum":            func() { cfg.GradAccum = c.Int("grad-accum") },
		"lr":                    func() { cfg.LR = c.Float("lr") },
		"seed":                  func() { cfg.Seed = c.Uint64("seed") },
		"no-export":             func() { cfg.Export = false },
		"block-size":            func() { cfg.BlockSchedule = []train.BlockStage{{Step: 0, Size: c.Int("block-size")}} },
		"init":                  func() { cfg.Init = c.String("init") },
		"model-config":          func() { cfg.ModelConfig = c.String("model-config") },
		"log-every":             func() { cfg.LogEvery = c.Int("log-every") },
		"no-checkpoint":         func() { cfg.CheckpointEvery, cfg.Export = -1, false },
	} {
		if c.IsSet(name) {
			set()
		}
	}
	for _, kv := range c.StringSlice("set") {
		if err := cfg.Set(kv); err != nil {
			return err
		}
	}
	if cfg.Data.Train == train.Synthetic {
		cfg.Data.Eval, cfg.Data.HoldOut = "", 0
	}
	log := c.Root().ErrWriter
	terminal := false
	if f, ok := log.(*os.File); ok {
		terminal = term.IsTerminal(int(f.Fd()))
	}
	// Ctrl-C or SIGTERM: the step in progress finishes and is checkpointed.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Data parallel: start this machine's ranks, or be one of them.
	l, err := newLaunch(c)
	if err != nil {
		return err
	}
	if l != nil {
		if err := cfg.Validate(); err != nil { // once here, not in every rank
			return err
		}
		return l.run(ctx)
	}
	dist, err := train.DistFromEnv(c.Duration("dist-timeout"))
	if err != nil {
		return err
	}
	res, err := train.Run(ctx, cfg, train.Options{Resume: c.Bool("resume"), Log: log, Terminal: terminal, CreatedBy: "dllm " + version, Dist: dist})
	if err != nil {
		return err
	}
	if dist != nil && dist.Rank != 0 {
		return nil // rank 0 reports
	}
	out := c.Root().Writer
	fmt.Fprintf(out, "trained to step %d (%d tokens)", res.State.Step, res.State.TokensSeen)
	if res.Checkpoint != "" {
		fmt.Fprintf(out, "; checkpoint %s", res.Checkpoint)
	}
	fmt.Fprintln(out)
	if res.Export != "" {
		fmt.Fprintf(out, "model: %s\n", res.Export)
	}
	return nil
}
