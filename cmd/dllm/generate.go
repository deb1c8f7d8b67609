package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"dllm/diffusion"
	"dllm/model"
	"dllm/tokenizer"
	"dllm/torch"
	"dllm/train"
)

func generateCommand() *cli.Command {
	return &cli.Command{
		Name:      "generate",
		Usage:     "generate text offline with the block-diffusion sampler (with --ar, plain AR decoding)",
		UsageText: "dllm generate --model DIR (--prompt TEXT | --chat FILE.json | --ids 1,2,3) [options]",
		Description: `Streams the text to stdout block by block as blocks are committed, then
prints tokens, steps, tokens per forward (TPF) and speed to stderr; --json
prints one object instead. Options default to the model's dllm.json.
See docs/sampler.md.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "model `DIR` made by dllm convert (any Llama checkpoint with --ar)"},
			&cli.StringFlag{Name: "prompt", Usage: "raw prompt `TEXT`, encoded without the chat template"},
			&cli.StringFlag{Name: "chat", Usage: "JSON list of messages in `FILE.json`, rendered with the chat template"},
			&cli.StringFlag{Name: "ids", Usage: "prompt token ids, e.g. 1,2,3"},
			&cli.IntFlag{Name: "max-tokens", Value: 256, Usage: "most tokens to generate"},
			&cli.IntFlag{Name: "block-size", Usage: "tokens denoised together (default: dllm.json's)"},
			&cli.FloatFlag{Name: "threshold", Usage: "commit every position at least this confident, in (0, 1] (default: dllm.json's)"},
			&cli.FloatFlag{Name: "temperature", Usage: "0 is greedy (default: dllm.json's)"},
			&cli.FloatFlag{Name: "top-p", Usage: "nucleus mass, in (0, 1] (default: dllm.json's)"},
			&cli.Uint64Flag{Name: "seed", Usage: "sampling seed"},
			&cli.BoolFlag{Name: "verify", Usage: "check every drafted block against the model's own greedy AR prediction (docs/sampler.md; default: dllm.json's for greedy decoding, off when sampling)"},
			&cli.BoolFlag{Name: "ignore-eos", Usage: "do not stop at the model's eos tokens"},
			&cli.BoolFlag{Name: "enable-thinking", Value: true, Usage: "with --chat, set enable_thinking (left to the template's default unless given)"},
			&cli.StringFlag{Name: "device", Value: "auto", Usage: "auto, cpu, cuda or cuda:N"},
			&cli.StringFlag{Name: "dtype", Value: "auto", Usage: "bf16 or f32; auto is bf16 on a GPU, f32 on the CPU"},
			&cli.BoolFlag{Name: "json", Usage: "print {ids, text, steps, tpf, finish_reason, prompt_tokens, seconds, checked, accepted}"},
			&cli.BoolFlag{Name: "ar", Usage: "decode the checkpoint as the AR model it was (block size 1 with the shift, no dllm.json needed): the baseline"},
		}, decoderFlags()...),
		Action: runGenerate,
	}
}

func runGenerate(ctx context.Context, c *cli.Command) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	dir := c.String("model")
	if hint := train.DirHint(dir); hint != "" {
		return errors.New(hint)
	}
	// 1. Everything that can fail fast, before the weights are read.
	settings, err := generateSettings(c, dir)
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	prompt, err := generatePrompt(c, tok)
	if err != nil {
		return err
	}
	if err := torch.Load(); err != nil {
		return err
	}
	dev, err := pickDevice(c.String("device"))
	if err != nil {
		return err
	}
	dtype, err := resolveDType(c.String("dtype"), dev)
	if err != nil {
		return err
	}
	// 2. The model.
	m, err := model.Load(dir, model.LoadOptions{Device: dev, DType: dtype, NoNormFold: c.Bool("no-norm-fold"), NoPersistentKernel: c.Bool("no-persistent-kernel")})
	if err != nil {
		return err
	}
	defer m.Free()
	if !c.Bool("ar") {
		if err := settings.Validate(m.Config.VocabSize); err != nil {
			return err
		}
	}
	s := diffusion.NewSampler(m, settings)
	defer s.Close()
	o := generateOptions(c, s.Defaults())
	if !c.Bool("ignore-eos") {
		// The stop rule serve uses: config.json's, the tokenizer's and
		// generation_config.json's eos ids.
		if o.StopIDs, err = diffusion.EOSIDs(dir, m.Config, tok); err != nil {
			return err
		}
	}
	// 3. Generate: one JSON object, or text streamed block by block.
	w := c.Root().Writer
	if c.Bool("json") {
		res, err := s.Generate(ctx, prompt, o, nil)
		if err != nil {
			return err
		}
		return printGenerateJSON(w, tok, prompt, res)
	}
	dec := tok.NewStreamDecoder(false)
	res, err := s.Generate(ctx, prompt, o, func(b diffusion.Block) (bool, error) {
		var text []byte
		for _, id := range b.IDs {
			text = append(text, dec.Add(int(id))...)
		}
		_, err := w.Write(text)
		return false, err
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, dec.Flush())
	printGenerateStats(c.Root().ErrWriter, len(prompt), res)
	return nil
}

// generateSettings reads dllm.json, or with --ar stands in the AR settings.
func generateSettings(c *cli.Command, dir string) (*diffusion.Settings, error) {
	if c.Bool("ar") {
		if c.IsSet("block-size") && c.Int("block-size") != 1 {
			return nil, fmt.Errorf("--ar decodes one token per block; --block-size %d needs a converted model", c.Int("block-size"))
		}
		return diffusion.ARSettings(), nil
	}
	if _, err := os.Stat(filepath.Join(dir, diffusion.SettingsFile)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is not a diffusion model directory (no %s); run dllm convert, or pass --ar to decode it as the AR model it is",
			dir, diffusion.SettingsFile)
	}
	return diffusion.LoadSettings(dir)
}

// generatePrompt encodes the one prompt source given.
func generatePrompt(c *cli.Command, tok *tokenizer.Tokenizer) ([]int64, error) {
	given := 0
	for _, name := range []string{"prompt", "chat", "ids"} {
		if c.IsSet(name) {
			given++
		}
	}
	if given != 1 {
		return nil, fmt.Errorf("generate needs exactly one of --prompt, --chat and --ids")
	}
	var ids []int
	switch {
	case c.IsSet("ids"):
		return parseIDs(c.String("ids"))
	case c.IsSet("prompt"):
		// As HF's tokenizer(text) would: a BOS first when the model wants one.
		if bos, ok := tok.BOS(); ok && tok.AddBOS() {
			ids = append(ids, bos)
		}
		ids = tok.AppendEncode(ids, c.String("prompt"))
	default:
		messages, err := os.ReadFile(c.String("chat"))
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		req := tokenizer.ChatRequest{Messages: messages, AddGenerationPrompt: true}
		if c.IsSet("enable-thinking") {
			thinking := c.Bool("enable-thinking")
			req.EnableThinking = &thinking
		}
		text, err := tok.ApplyChatTemplate(req)
		if err != nil {
			return nil, fmt.Errorf("generate %s: %w", c.String("chat"), err)
		}
		ids = tok.Encode(text)
	}
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out, nil
}

// resolveDType resolves a --dtype of auto: bf16 on a GPU, f32 on the CPU
// (where bf16 is slow and rounds the logits).
func resolveDType(s string, dev torch.Device) (torch.DType, error) {
	if s == "auto" {
		if dev.CUDA {
			return torch.BFloat16, nil
		}
		return torch.Float32, nil
	}
	return computeDType(s)
}

// generateOptions lays the flags that were given over the defaults.
func generateOptions(c *cli.Command, o diffusion.Options) diffusion.Options {
	o.MaxNewTokens = c.Int("max-tokens")
	o.BlockSize = c.Int("block-size")
	o.Threshold = c.Float("threshold")
	if c.IsSet("temperature") {
		o.Temperature = c.Float("temperature")
	}
	if c.IsSet("top-p") {
		o.TopP = c.Float("top-p")
	}
	if c.IsSet("verify") {
		o.Verify = c.Bool("verify")
	} else {
		o.DropDefaultVerify()
	}
	o.Seed = c.Uint64("seed")
	return o
}

func printGenerateJSON(w io.Writer, tok *tokenizer.Tokenizer, prompt []int64, res *diffusion.Result) error {
	ids := make([]int, len(res.IDs))
	for i, id := range res.IDs {
		ids[i] = int(id)
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(struct {
		IDs          []int64 `json:"ids"`
		Text         string  `json:"text"`
		Steps        int     `json:"steps"`
		TPF          float64 `json:"tpf"`
		FinishReason string  `json:"finish_reason"`
		PromptTokens int     `json:"prompt_tokens"`
		Seconds      float64 `json:"seconds"`
		Checked      int     `json:"checked,omitempty"`
		Accepted     int     `json:"accepted,omitempty"`
	}{res.IDs, tok.Decode(ids, false), res.Steps, res.TPF, res.FinishReason, len(prompt), res.Duration.Seconds(), res.Checked, res.Accepted})
}

// printGenerateStats reports speed after the prefill, the part the sampler
// makes faster.
func printGenerateStats(w io.Writer, promptTokens int, res *diffusion.Result) {
	decode := res.Duration - res.Prefill
	rate := 0.0
	if decode > 0 {
		rate = float64(len(res.IDs)) / decode.Seconds()
	}
	verified := ""
	if res.Checked > 0 {
		verified = fmt.Sprintf(" (verify: %d of %d drafted tokens stood)", res.Accepted, res.Checked)
	}
	fmt.Fprintf(w, "%d tokens, %d steps, TPF %.2f%s, %.1f tok/s; prompt %d tokens, prefill %.1f ms; finish %s\n",
		len(res.IDs), res.Steps, res.TPF, verified, rate, promptTokens, float64(res.Prefill.Microseconds())/1000, res.FinishReason)
}
