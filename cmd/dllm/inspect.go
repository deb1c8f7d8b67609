package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"dllm/model"
	"dllm/train"
)

// modelInfo is what `dllm inspect` reports.
type modelInfo struct {
	Dir           string         `json:"dir"`
	Architecture  string         `json:"architecture"`
	Params        int64          `json:"parameters"`
	DType         string         `json:"dtype"`
	Bytes         int64          `json:"weight_bytes"`
	Tensors       int            `json:"tensors"`
	Layers        int            `json:"layers"`
	Hidden        int            `json:"hidden_size"`
	Heads         int            `json:"attention_heads"`
	KVHeads       int            `json:"kv_heads"`
	HeadDim       int            `json:"head_dim"`
	Vocab         int            `json:"vocab_size"`
	MaxPositions  int            `json:"max_position_embeddings"`
	KVBytesPerTok int64          `json:"kv_bytes_per_token"`
	Tokenizer     bool           `json:"tokenizer"`
	ChatTemplate  bool           `json:"chat_template"`
	Diffusion     map[string]any `json:"diffusion,omitempty"`
}

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "describe a model directory (architecture, size, tokenizer, diffusion settings)",
		ArgsUsage: "MODEL_DIR",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() != 1 {
				return fmt.Errorf("inspect needs one MODEL_DIR argument")
			}
			dir := c.Args().First()
			hint := train.DirHint(dir)
			info, err := inspect(dir)
			if err != nil {
				if hint != "" {
					return errors.New(hint)
				}
				return err
			}
			w := c.Root().Writer
			if c.Bool("json") {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				return enc.Encode(info)
			}
			fmt.Fprintf(w, "model         %s\n", info.Dir)
			fmt.Fprintf(w, "architecture  %s, %d layers, hidden %d, heads %d/%d (head_dim %d), vocab %d\n",
				info.Architecture, info.Layers, info.Hidden, info.Heads, info.KVHeads, info.HeadDim, info.Vocab)
			fmt.Fprintf(w, "parameters    %d (%.2f B)\n", info.Params, float64(info.Params)/1e9)
			fmt.Fprintf(w, "weights       %s, %d tensors, %.2f GB\n", info.DType, info.Tensors, float64(info.Bytes)/1e9)
			fmt.Fprintf(w, "context       %d positions, KV cache %d bytes/token\n", info.MaxPositions, info.KVBytesPerTok)
			fmt.Fprintf(w, "tokenizer     %s\n", yesNo(info.Tokenizer))
			fmt.Fprintf(w, "chat template %s\n", yesNo(info.ChatTemplate))
			if info.Diffusion != nil {
				// No HTML escaping: the mask token reads "<|mask|>", not "\u003c|mask|\u003e".
				var b strings.Builder
				enc := json.NewEncoder(&b)
				enc.SetEscapeHTML(false)
				enc.Encode(info.Diffusion)
				fmt.Fprintf(w, "diffusion     %s", b.String())
			} else if hint != "" {
				fmt.Fprintf(w, "diffusion     none here: %s\n", hint)
			} else {
				fmt.Fprintf(w, "diffusion     none (an autoregressive checkpoint; see dllm convert)\n")
			}
			return nil
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// inspect reads config.json, the safetensors headers and the side files; it
// loads no weights.
func inspect(dir string) (*modelInfo, error) {
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := model.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	if err := model.CheckTensors(cfg, ck.Shapes()); err != nil {
		return nil, err
	}
	info := &modelInfo{
		Dir: dir, Architecture: cfg.Architecture, Params: cfg.NumParams(),
		Layers: cfg.NumHiddenLayers, Hidden: cfg.HiddenSize, Heads: cfg.NumAttentionHeads,
		KVHeads: cfg.NumKeyValueHeads, HeadDim: cfg.HeadDim, Vocab: cfg.VocabSize,
		MaxPositions: cfg.MaxPositionEmbeddings,
	}
	dtypes := map[string]bool{}
	for _, t := range ck.Tensors() {
		info.Bytes += t.Size
		info.Tensors++
		dtypes[t.DType.String()] = true
	}
	for d := range dtypes {
		if info.DType != "" {
			info.DType += "+"
		}
		info.DType += d
	}
	if et, ok := ck.Tensor("model.embed_tokens.weight"); ok {
		info.KVBytesPerTok = cfg.KVBytesPerToken(et.DType.Size())
	}
	info.Tokenizer = exists(filepath.Join(dir, "tokenizer.json"))
	info.ChatTemplate = exists(filepath.Join(dir, "chat_template.jinja")) || hasChatTemplate(filepath.Join(dir, "tokenizer_config.json"))
	if b, err := os.ReadFile(filepath.Join(dir, "dllm.json")); err == nil {
		if err := json.Unmarshal(b, &info.Diffusion); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "dllm.json"), err)
		}
	}
	return info, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func hasChatTemplate(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var tc struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	return json.Unmarshal(b, &tc) == nil && len(tc.ChatTemplate) > 0 && string(tc.ChatTemplate) != "null"
}
