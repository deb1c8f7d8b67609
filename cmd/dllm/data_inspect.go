package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"dllm/data"
	"dllm/tokenizer"
)

func dataInspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "print a shard's header, checksum status and decoded samples with loss and document marks",
		ArgsUsage: "SHARD",
		Description: `Loss-ON (training target) text is shown inside ⟦…⟧ (green on a
terminal); ⟪doc⟫ marks where a document starts. The tokenizer comes from
--tokenizer, else from the manifest.json beside the shard; without one,
token ids are printed.`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "n", Value: 3, Usage: "number of sequences to print"},
			&cli.IntFlag{Name: "start", Usage: "first sequence to print"},
			&cli.StringFlag{Name: "tokenizer", Usage: "model or tokenizer `DIR` to decode with"},
			&cli.BoolFlag{Name: "ids", Usage: "print token ids instead of text"},
		},
		Action: runDataInspect,
	}
}

func runDataInspect(ctx context.Context, c *cli.Command) error {
	if c.NArg() != 1 {
		return fmt.Errorf("data inspect needs one SHARD argument")
	}
	path := c.Args().First()
	w := c.Root().Writer
	s, err := data.OpenShardUnchecked(path)
	if err != nil {
		return err
	}
	defer s.Close()
	h := s.Header
	checksum := "ok"
	cerr := s.VerifyChecksum()
	if cerr != nil {
		checksum = "MISMATCH: the shard is corrupt"
	}
	fmt.Fprintf(w, "shard %s\n  format v%d, %d sequences x %d tokens, %d document starts, %d bytes, vocab %d\n  body crc32c %08x: %s\n",
		path, h.Version, h.NumSeqs, h.SeqLen, h.NumDocStarts, h.FileSize, h.VocabSize, h.BodyCRC, checksum)

	man, manErr := data.ReadManifest(filepath.Dir(path))
	if manErr == nil {
		fmt.Fprintf(w, "  manifest: %s, complete %v, %d shards, tokenizer %s\n", man.CreatedBy, man.Complete, len(man.Shards), man.Tokenizer.Dir)
		found := false
		for _, rec := range man.Shards {
			if rec.File == filepath.Base(path) {
				found = true
				match := rec.CRC32C == fmt.Sprintf("%08x", h.BodyCRC) && rec.NumSeqs == h.NumSeqs && rec.Bytes == h.FileSize
				fmt.Fprintf(w, "  manifest record: %d sequences, %d loss-ON tokens, matches file: %v\n", rec.NumSeqs, rec.LossTokens, match)
			}
		}
		if !found {
			fmt.Fprintln(w, "  manifest record: none for this file")
		}
	}

	var tok *tokenizer.Tokenizer
	if !c.Bool("ids") {
		dir := c.String("tokenizer")
		if dir == "" && man != nil {
			dir = man.Tokenizer.Dir
		}
		if dir != "" {
			if tok, err = tokenizer.Load(dir); err != nil {
				fmt.Fprintf(w, "  tokenizer %s: %v; printing ids\n", dir, err)
				tok = nil
			}
		}
	}
	color := false
	if f, ok := w.(*os.File); ok {
		color = data.IsTerminal(f)
	}
	start, n := c.Int("start"), c.Int("n")
	if start < 0 || n < 0 {
		return fmt.Errorf("--start and --n must not be negative")
	}
	for i := start; i < min(start+n, s.NumSeqs()); i++ {
		tokens, loss, starts := s.Seq(i)
		fmt.Fprintf(w, "\n── sequence %d: %d document starts %v, %d/%d loss-ON ──\n", i, len(starts), starts, loss.Count(len(tokens)), len(tokens))
		renderSeq(w, tok, tokens, loss, starts, color)
		fmt.Fprintln(w)
	}
	return cerr
}

// renderSeq writes a sequence as text (or ids without a tokenizer),
// marking document starts and loss-ON runs.
func renderSeq(w io.Writer, tok *tokenizer.Tokenizer, tokens []uint32, loss data.LossMask, starts []uint32, color bool) {
	open, close := "⟦", "⟧"
	if color {
		open, close = "\x1b[32m⟦", "⟧\x1b[0m"
	}
	var b strings.Builder
	var run []int
	on := false
	flush := func() {
		if len(run) == 0 {
			return
		}
		var text string
		if tok != nil {
			text = tok.Decode(run, false)
		} else {
			parts := make([]string, len(run))
			for k, id := range run {
				parts[k] = fmt.Sprint(id)
			}
			text = strings.Join(parts, " ") + " "
		}
		if on {
			text = open + text + close
		}
		b.WriteString(text)
		run = run[:0]
	}
	next := 0
	for j, id := range tokens {
		isStart := next < len(starts) && int(starts[next]) == j
		if isStart {
			next++
		}
		o := loss.On(j)
		if o != on || isStart {
			flush()
			on = o
		}
		if isStart {
			b.WriteString("⟪doc⟫")
		}
		run = append(run, int(id))
	}
	flush()
	fmt.Fprint(w, b.String())
}
