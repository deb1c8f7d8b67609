package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v3"

	"dllm/data"
)

func dataCommand() *cli.Command {
	return &cli.Command{
		Name:  "data",
		Usage: "turn Parquet, Arrow and JSONL corpora into packed training shards, look inside them, generate synthetic tasks",
		Commands: []*cli.Command{
			dataPrepareCommand(),
			dataInspectCommand(),
			dataSynthCommand(),
			dataDistillCommand(),
		},
	}
}

func dataPrepareCommand() *cli.Command {
	return &cli.Command{
		Name:      "prepare",
		Usage:     "tokenize, mix and pack the sources of a data config into shards",
		UsageText: "dllm data prepare --config configs/data/NAME.yaml [--tokenizer DIR] [--out DIR] [options]",
		Description: `Reads every source of the config (plain text or OpenAI-style chats, from
Parquet, Arrow IPC or JSONL files), tokenizes on all cores, mixes the
sources by token share (weight), packs documents back to back with a
separator into sequences of seq_len tokens, and writes shards plus
manifest.json to the output directory. Chats are rendered with the
model's chat template; only assistant tokens are training targets.

Options come from the built-in defaults, then --config, then flags.
A rerun into the same directory resumes after the last verified shard
(or verifies a finished run); a run of different inputs is refused
unless --force. See configs/data/README.md and docs/data-format.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Required: true, Usage: "data config `FILE` (YAML), e.g. configs/data/example.yaml"},
			&cli.StringFlag{Name: "tokenizer", Usage: "model or tokenizer `DIR`"},
			&cli.StringFlag{Name: "out", Usage: "output `DIR` for shards and manifest.json"},
			&cli.IntFlag{Name: "seq-len", Usage: "tokens per packed sequence"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed for file and buffer shuffling"},
			&cli.IntFlag{Name: "workers", Usage: "tokenizing workers (0: one per CPU)"},
			&cli.Int64Flag{Name: "shard-tokens", Usage: "tokens per shard (rounded down to whole sequences)"},
			&cli.Int64Flag{Name: "total-tokens", Usage: "stop after this many output tokens (0: until the sources run out)"},
			&cli.BoolFlag{Name: "force", Usage: "discard what the output directory holds and start over"},
		},
		Action: runDataPrepare,
	}
}

func runDataPrepare(ctx context.Context, c *cli.Command) error {
	cfg := data.DefaultConfig()
	if err := cfg.LoadConfig(c.String("config")); err != nil {
		return err
	}
	if c.IsSet("tokenizer") {
		cfg.Tokenizer = c.String("tokenizer")
	}
	if c.IsSet("out") {
		cfg.Out = c.String("out")
	}
	if c.IsSet("seq-len") {
		cfg.SeqLen = c.Int("seq-len")
	}
	if c.IsSet("seed") {
		cfg.Seed = c.Uint64("seed")
	}
	if c.IsSet("workers") {
		cfg.Workers = c.Int("workers")
	}
	if c.IsSet("shard-tokens") {
		cfg.ShardTokens = c.Int64("shard-tokens")
	}
	if c.IsSet("total-tokens") {
		cfg.TotalTokens = c.Int64("total-tokens")
	}
	log := c.Root().ErrWriter
	if log == nil {
		log = os.Stderr
	}
	// Ctrl-C stops after removing the shard being written; the shards
	// already committed stay, and a rerun resumes after them.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := data.Prepare(ctx, data.Options{
		Config:    cfg,
		Force:     c.Bool("force"),
		CreatedBy: "dllm " + version,
		Log:       log,
		Terminal:  data.IsTerminal(log),
	})
	if err != nil {
		return err
	}
	w := c.Root().Writer
	t := m.Totals
	fmt.Fprintf(w, "%s: %d shards, %d sequences x %d tokens = %d tokens (%.1f%% loss-ON), %d dropped\n",
		cfg.Out, len(m.Shards), t.Sequences, m.SeqLen, t.Tokens, 100*float64(t.LossTokens)/float64(max(t.Tokens, 1)), t.DroppedTokens)
	for _, s := range m.Sources {
		fmt.Fprintf(w, "  %-12s %-4s %12d tokens  share %.3f (target %.3f)  docs %d  skipped: %s  %s\n",
			s.Name, s.Kind, s.Stats.Tokens, s.Share, s.TargetShare, s.Stats.Documents, s.Stats.SkippedText(), s.Stats.Done)
	}
	return nil
}
