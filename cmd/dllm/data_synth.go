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
		UsageText: "dllm data synth --out DIR [--tasks v2] [--size cpu|gpu] [--train N] [--dev N] [--heldout N] [--text N] [--seed S]",
		Description: `Writes DIR/train.jsonl (chats in OpenAI messages format: the user's
question, the assistant's step-by-step work in reasoning_content and
"Answer: X" in content, or for code a Python function in a code block),
DIR/heldout.jsonl and, with --dev, DIR/dev.jsonl (questions with their
answers: the input of 'dllm eval'; choose knobs on dev, score on held-out),
with --text DIR/text.jsonl (plain-text stories for the training mix) and
DIR/tasks.json (per task: chance level, answer format, counts).

Task set v2 (the default): sum (2-4 numbers of 1-4 digits: answers of any
width), sort (a list sorted up or down: the answer is a list), ledger (a
stock through many days, in prose: long work), word (word problems in
prose), code (a Python function from words, scored by running it). --size
scales their lengths: cpu for 512-token sequences, gpu for ledgers of
about a thousand tokens. Set v1: add, mul, mcq (four options, chance
0.25), trace (one width per answer, short work). --tasks takes task and set
names. --train, --dev and --heldout count problems per task. Held-out
problems are drawn first, then dev ones; a training problem with the same
canonical form (hash) as a held-out or dev one is never written. The same
seed and counts give the same files byte for byte. See docs/proxy.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Required: true, Usage: "output `DIR`"},
			&cli.StringFlag{Name: "tasks", Value: "v2", Usage: "comma-separated task or set `NAMES` (sets: v1, v2; tasks: " + strings.Join(synth.TaskNames(), ", ") + ")"},
			&cli.StringFlag{Name: "size", Value: "gpu", Usage: "problem lengths of the v2 tasks: cpu or gpu"},
			&cli.IntFlag{Name: "train", Value: 5000, Usage: "training problems per task"},
			&cli.IntFlag{Name: "dev", Usage: "dev problems per task, for choosing knobs"},
			&cli.IntFlag{Name: "heldout", Value: 100, Usage: "held-out problems per task"},
			&cli.IntFlag{Name: "text", Usage: "plain-text documents (short stories) for the training mix"},
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
	set, err := synth.Generate(synth.Options{Tasks: names, Size: c.String("size"), Train: c.Int("train"), Dev: c.Int("dev"),
		Heldout: c.Int("heldout"), Text: c.Int("text"), Seed: c.Uint64("seed")})
	if err != nil {
		return err
	}
	out := c.String("out")
	if err := set.Write(out); err != nil {
		return err
	}
	w := c.Root().Writer
	sum := set.Summary()
	files := []string{synth.TrainFile, synth.HeldoutFile, synth.TasksFile}
	if c.Int("dev") > 0 {
		files = append(files, synth.DevFile)
	}
	if sum.Text > 0 {
		files = append(files, synth.TextFile)
	}
	fmt.Fprintf(w, "%s (size %s): %s\n", out, sum.Size, strings.Join(files, ", "))
	for _, t := range sum.Tasks {
		fmt.Fprintf(w, "  %-6s train %6d  dev %4d  held-out %5d  chance %.2f  answer %s\n", t.Name, t.Train, t.Dev, t.Heldout, t.Chance, t.AnswerFormat)
	}
	if sum.Text > 0 {
		fmt.Fprintf(w, "  text   %d stories\n", sum.Text)
	}
	fmt.Fprintf(w, "evaluate with: dllm eval --server URL --tasks %s\n", filepath.Join(out, synth.HeldoutFile))
	return nil
}
