package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"dllm/synth"
)

func dataSynthCommand() *cli.Command {
	return &cli.Command{
		Name:      "synth",
		Usage:     "generate synthetic reasoning tasks with exact answers (train chats, held-out eval set)",
		UsageText: "dllm data synth --out DIR [--tasks add,mul,mcq,trace] [--train N] [--heldout N] [--seed S]",
		Description: `Writes DIR/train.jsonl (chats in OpenAI messages format: the user's
question, the assistant's step-by-step work in reasoning_content and
"Answer: X" in content), DIR/heldout.jsonl (the held-out questions with
their answers, the input of 'dllm eval') and DIR/tasks.json (per task:
chance level, answer format, counts).

Tasks: add (column addition with carries), mul (long multiplication with
partial products), mcq (four options, chance 0.25), trace (the final value
of a variable in a toy program). --train and --heldout count problems per
task. Held-out problems are drawn first; a training problem with the same
canonical form (hash) as a held-out one is never written. The same seed
and counts give the same files byte for byte. See docs/proxy.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Required: true, Usage: "output `DIR`"},
			&cli.StringFlag{Name: "tasks", Value: strings.Join(synth.TaskNames(), ","), Usage: "comma-separated task `NAMES`"},
			&cli.IntFlag{Name: "train", Value: 5000, Usage: "training problems per task"},
			&cli.IntFlag{Name: "heldout", Value: 100, Usage: "held-out problems per task"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed for every problem drawn"},
		},
		Action: runDataSynth,
	}
}

func runDataSynth(ctx context.Context, c *cli.Command) error {
	var names []string
	for _, n := range strings.Split(c.String("tasks"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("data synth: --tasks names no task (have %s)", strings.Join(synth.TaskNames(), ", "))
	}
	set, err := synth.Generate(synth.Options{Tasks: names, Train: c.Int("train"), Heldout: c.Int("heldout"), Seed: c.Uint64("seed")})
	if err != nil {
		return err
	}
	out := c.String("out")
	if err := set.Write(out); err != nil {
		return err
	}
	w := c.Root().Writer
	fmt.Fprintf(w, "%s: %s, %s, %s\n", out, synth.TrainFile, synth.HeldoutFile, synth.TasksFile)
	for _, t := range set.Summary().Tasks {
		fmt.Fprintf(w, "  %-6s train %6d  held-out %5d  chance %.2f  answer %s\n", t.Name, t.Train, t.Heldout, t.Chance, t.AnswerFormat)
	}
	fmt.Fprintf(w, "evaluate with: dllm eval --server URL --tasks %s\n", filepath.Join(out, synth.HeldoutFile))
	return nil
}
