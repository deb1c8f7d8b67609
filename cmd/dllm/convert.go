package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"dllm/convert"
)

func convertCommand() *cli.Command {
	return &cli.Command{
		Name:      "convert",
		Usage:     "turn an AR HuggingFace checkpoint into a block-diffusion model directory",
		UsageText: "dllm convert --from HF_DIR --out DIR [--preset configs/minicpm5-2b.yaml] [options]",
		Description: `Validates the checkpoint (architecture, every tensor present and shaped
right, tokenizer), picks a mask token (an existing one, else the first
padded embedding row, else a new row set to the mean row) and writes DIR:
config.json, the weights, the tokenizer files, generation_config.json and
dllm.json with the diffusion settings.

Weights that need no change are hard-linked (else reflinked, else copied),
so a conversion takes seconds; --dtype other than the source's rewrites
them. Everything is written to DIR.tmp-XXXX beside DIR, verified, and only
then renamed to DIR: a failed or interrupted conversion leaves no DIR.

Options come from the built-in defaults, then --preset, then flags.

--hash=full (default) records the sha256 of the weights in dllm.json; it is
computed while the files are linked, copied or rewritten, about 2.5 s for
5 GB on a CPU with SHA extensions. --hash=fast records a fingerprint of the
safetensors headers and file sizes instead, which reads kilobytes; it tells
checkpoints of different tensors apart but not ones whose values changed.
See docs/convert.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from", Usage: "HuggingFace checkpoint directory to convert", Required: true},
			&cli.StringFlag{Name: "out", Usage: "model directory to create", Required: true},
			&cli.StringFlag{Name: "preset", Usage: "YAML preset of defaults, e.g. configs/minicpm5-2b.yaml"},
			&cli.IntFlag{Name: "block-size", Usage: "diffusion block size (default: 32)"},
			&cli.StringFlag{Name: "mask-token", Usage: "mask token spelling (default: <|mask|>)"},
			&cli.StringFlag{Name: "dtype", Usage: "output weights dtype: auto (keep), bf16, f16 or f32"},
			&cli.StringFlag{Name: "hash", Usage: "source identity in dllm.json: full (sha256) or fast (headers and sizes)"},
			&cli.BoolFlag{Name: "force", Usage: "replace DIR if it is an existing dllm model directory"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the plan and write nothing"},
		},
		Action: runConvert,
	}
}

func runConvert(ctx context.Context, c *cli.Command) error {
	opts := convert.DefaultOptions()
	if path := c.String("preset"); path != "" {
		if err := opts.ApplyPreset(path); err != nil {
			return err
		}
	}
	if c.IsSet("block-size") {
		opts.BlockSize = c.Int("block-size")
	}
	if c.IsSet("mask-token") {
		opts.MaskToken = c.String("mask-token")
	}
	if c.IsSet("dtype") {
		opts.DType = c.String("dtype")
	}
	if c.IsSet("hash") {
		opts.Hash = c.String("hash")
	}
	opts.From, opts.Out = c.String("from"), c.String("out")
	opts.Force = c.Bool("force")
	opts.CreatedBy = "dllm " + version
	out, log := c.Root().Writer, c.Root().ErrWriter
	opts.Log = log
	if f, ok := log.(*os.File); ok {
		opts.Terminal = term.IsTerminal(int(f.Fd()))
	}

	plan, err := convert.NewPlan(opts)
	if err != nil {
		return err
	}
	defer plan.Close()
	if c.Bool("dry-run") {
		plan.Print(out)
		fmt.Fprintln(out, "dry run: nothing written")
		return nil
	}
	plan.Print(log)
	// Ctrl-C cancels the conversion, which then removes its temporary
	// directory instead of leaving gigabytes behind.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := plan.Execute(ctx)
	if err != nil {
		return err
	}
	counts := map[convert.Action]int{}
	for _, a := range res.Done {
		counts[a]++
	}
	s := res.Settings
	id := "sha256 " + s.Source.SHA256
	if s.Source.SHA256 == "" {
		id = "fingerprint " + s.Source.Fingerprint
	}
	fmt.Fprintf(out, "wrote %s in %.1fs: mask %s = %d (%s); files: %d linked, %d reflinked, %d copied, %d rewritten, %d edited; source %s\n",
		res.Out, res.Elapsed.Seconds(), s.MaskToken, s.MaskTokenID, plan.Mask.How,
		counts[convert.Link], counts[convert.Reflink], counts[convert.Copy], counts[convert.Rewrite], counts[convert.Edit], id)
	return nil
}
