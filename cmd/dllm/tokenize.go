package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"dllm/tokenizer"
)

func tokenizeCommand() *cli.Command {
	return &cli.Command{
		Name:      "tokenize",
		Usage:     "print the token ids of TEXT, or of a conversation rendered through the model's chat template",
		ArgsUsage: "TEXT",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "model `DIR` (tokenizer files are enough) or a tokenizer.json"},
			&cli.BoolFlag{Name: "json", Usage: `print {"ids": [...]} (with --chat, {"prompt": ..., "ids": [...]})`},
			&cli.StringFlag{Name: "chat", Usage: "render the JSON list of messages in `FILE.json` through the chat template instead of taking TEXT"},
			&cli.BoolFlag{Name: "enable-thinking", Usage: "with --chat, set enable_thinking to this (default: the template's own)"},
			&cli.BoolFlag{Name: "add-generation-prompt", Value: true, Usage: "with --chat, open the assistant's turn (--add-generation-prompt=false: do not)"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			tok, err := tokenizer.Load(c.String("model"))
			if err != nil {
				return err
			}
			chatFile := c.String("chat")
			switch {
			case chatFile == "" && c.NArg() != 1:
				return fmt.Errorf("tokenize needs one TEXT argument (or --chat FILE.json)")
			case chatFile != "" && c.NArg() != 0:
				return fmt.Errorf("tokenize takes either TEXT or --chat FILE.json, not both")
			case chatFile == "":
				return printTokens(c.Root().Writer, c.Bool("json"), nil, tok.Encode(c.Args().First()))
			}
			messages, err := os.ReadFile(chatFile)
			if err != nil {
				return fmt.Errorf("tokenize: %w", err)
			}
			req := tokenizer.ChatRequest{Messages: messages, AddGenerationPrompt: c.Bool("add-generation-prompt")}
			if c.IsSet("enable-thinking") {
				thinking := c.Bool("enable-thinking")
				req.EnableThinking = &thinking
			}
			prompt, err := tok.ApplyChatTemplate(req)
			if err != nil {
				return fmt.Errorf("tokenize %s: %w", chatFile, err)
			}
			return printTokens(c.Root().Writer, c.Bool("json"), &prompt, tok.Encode(prompt))
		},
	}
}

// printTokens writes the ids as one line (after the prompt, if any) or as
// one JSON object.
func printTokens(w io.Writer, asJSON bool, prompt *string, ids []int) error {
	if asJSON {
		enc := json.NewEncoder(w)
		// Special tokens such as <|im_start|> should stay readable.
		enc.SetEscapeHTML(false)
		return enc.Encode(struct {
			Prompt *string `json:"prompt,omitempty"`
			IDs    []int   `json:"ids"`
		}{prompt, append([]int{}, ids...)})
	}
	if prompt != nil {
		fmt.Fprint(w, *prompt)
		if !strings.HasSuffix(*prompt, "\n") {
			fmt.Fprintln(w)
		}
	}
	fields := make([]string, len(ids))
	for i, id := range ids {
		fields[i] = strconv.Itoa(id)
	}
	_, err := fmt.Fprintln(w, strings.Join(fields, " "))
	return err
}
