package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"dllm/train"
)

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write a servable model directory from a training checkpoint",
		UsageText: "dllm export --checkpoint DIR --out MODEL_DIR [--dtype auto|bf16|f16|f32] [--tokenizer DIR]",
		Description: `DIR is a checkpoint (OUT/checkpoints/step-NNNNNNN) or a training output
directory, whose newest valid checkpoint is taken. The checkpoint is
verified against its sha256 manifest first. MODEL_DIR gets config.json,
model.safetensors in the model's dtype (--dtype auto: the training config's
export_dtype, else config.json's), the tokenizer files of the model training
started from (or of --tokenizer), dllm.json with the trained block size and
shift, and train.json recording the run. MODEL_DIR must not exist; it is
written beside its name and renamed into place.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "checkpoint `DIR`, or a training output directory", Required: true},
			&cli.StringFlag{Name: "out", Usage: "model `DIR` to create", Required: true},
			&cli.StringFlag{Name: "dtype", Value: "auto", Usage: "weights dtype: auto, bf16, f16 or f32"},
			&cli.StringFlag{Name: "tokenizer", Usage: "`DIR` whose tokenizer files to copy (default: the model training started from)"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			ck := c.String("checkpoint")
			if root := filepath.Join(ck, "checkpoints"); dirExists(root) {
				dir, _, err := train.LatestCheckpoint(root, func(msg string) { fmt.Fprintln(c.Root().ErrWriter, "dllm export: warning:", msg) })
				if err != nil {
					return err
				}
				if dir == "" {
					return fmt.Errorf("export: %s holds no valid checkpoint", root)
				}
				ck = dir
			}
			err := train.Export(ck, c.String("out"), train.ExportOptions{DType: c.String("dtype"), Tokenizer: c.String("tokenizer"), CreatedBy: "dllm " + version})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Root().Writer, "exported %s to %s\n", ck, c.String("out"))
			return nil
		},
	}
}

// dirExists reports whether p is a directory.
func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
