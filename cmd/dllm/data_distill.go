package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"dllm/data"
)

func dataDistillCommand() *cli.Command {
	return &cli.Command{
		Name:      "distill",
		Usage:     "ask a teacher server to answer prompts with its reasoning, as chat JSONL for dllm data prepare",
		UsageText: "dllm data distill --teacher URL --prompts FILE [--out FILE.jsonl] [--model NAME] [--concurrency 8] [--max-tokens 8192] [options]",
		Description: `Self-distillation: sends every prompt of FILE to an OpenAI-compatible
chat endpoint (dllm serve on the original checkpoint converted with
--block-size 1, which decodes exactly as the AR model; or vLLM, SGLang)
and appends one line per answer to --out:

  {"id", "messages": [...the prompt..., {"role": "assistant", "content",
   "reasoning_content"}], "finish_reason", "usage", "model"}

ready for a chat source of dllm data prepare. The reasoning comes from
the answer's reasoning_content or reasoning field, or is split off
"<think>...</think>" in the content when the server does not split it.

Prompts: JSONL of {"id", "messages": [...]} or {"id", "prompt": "text"}
(ShareGPT "conversations" too), or Parquet/Arrow with a messages column
(--prompt-field); a quoted glob reads several files in sorted order (ids
then get the file's name as a prefix). Messages after the last user turn
(a dataset's own answer) are dropped. A prompt without an id gets one
from its content.

Resumable: a rerun skips the ids already in --out, after cutting off a
partial last line left by a crash; lines are fsynced in small batches.
Answers are written in the order they arrive, not the prompts' order.
429, 5xx, timeouts and dropped connections are retried with backoff;
prompts that fail for good are logged to OUT.errors.jsonl and asked again
by the next run. Answers cut at --max-tokens (finish_reason "length") are
kept with "truncated": true, or with --drop-truncated moved to
OUT.truncated.jsonl. Prompts files that look like evaluation sets
(GPQA, MATH-500, LiveCodeBench, MMLU-Pro, any test/validation split) are
refused. See docs/recipe.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "teacher", Required: true, Usage: "teacher server `URL` (its root, /v1, or /v1/chat/completions)"},
			&cli.StringFlag{Name: "prompts", Required: true, Usage: "prompts `FILE` (.jsonl, .jsonl.gz, .parquet, .arrow) or a quoted glob of them"},
			&cli.StringFlag{Name: "out", Usage: "output `FILE.jsonl` (default: the prompts file's name + .distilled.jsonl; required with a glob)"},
			&cli.StringFlag{Name: "model", Usage: "the request's model (default: the server's first in /v1/models)"},
			&cli.StringFlag{Name: "prompt-field", Usage: "JSON key or column of the prompt (default: messages, conversations or prompt)"},
			&cli.IntFlag{Name: "concurrency", Value: 8, Usage: "requests in flight; not given, the teacher's max_num_seqs when it reports more (dllm serve --max-num-seqs)"},
			&cli.IntFlag{Name: "max-tokens", Value: 8192, Usage: "cap on each answer, reasoning included"},
			&cli.FloatFlag{Name: "temperature", Value: 0.6, Usage: "sampling temperature"},
			&cli.FloatFlag{Name: "top-p", Value: 0.95, Usage: "nucleus sampling (0: not sent)"},
			&cli.BoolFlag{Name: "enable-thinking", Value: true, Usage: "chat_template_kwargs.enable_thinking"},
			&cli.IntFlag{Name: "n", Value: 1, Usage: "answers per prompt (one request each; records get \"sample\")"},
			&cli.IntFlag{Name: "limit", Usage: "use the first N prompts (0: all)"},
			&cli.BoolFlag{Name: "drop-truncated", Usage: "keep answers cut at --max-tokens out of --out (they go to OUT.truncated.jsonl)"},
			&cli.StringFlag{Name: "extra", Usage: "JSON object of more request fields, e.g. '{\"top_k\":20}'"},
			&cli.StringFlag{Name: "api-key", Sources: cli.EnvVars("OPENAI_API_KEY"), Usage: "bearer token, if the server wants one"},
			&cli.DurationFlag{Name: "request-timeout", Value: 30 * time.Minute, Usage: "limit on one attempt"},
			&cli.IntFlag{Name: "retries", Value: 8, Usage: "retries after 429/5xx, a timeout or a dropped connection"},
			&cli.IntFlag{Name: "max-consecutive-errors", Value: 50, Usage: "stop when this many answers in a row fail for good (-1: never)"},
		},
		Action: runDataDistill,
	}
}

func runDataDistill(ctx context.Context, c *cli.Command) error {
	log := c.Root().ErrWriter
	if log == nil {
		log = os.Stderr
	}
	o := data.DistillOptions{
		Teacher:              c.String("teacher"),
		APIKey:               c.String("api-key"),
		Model:                c.String("model"),
		Prompts:              c.String("prompts"),
		PromptField:          c.String("prompt-field"),
		Limit:                c.Int("limit"),
		Out:                  c.String("out"),
		Concurrency:          c.Int("concurrency"),
		MaxTokens:            c.Int("max-tokens"),
		Temperature:          c.Float("temperature"),
		TopP:                 c.Float("top-p"),
		EnableThinking:       c.Bool("enable-thinking"),
		N:                    c.Int("n"),
		DropTruncated:        c.Bool("drop-truncated"),
		RequestTimeout:       c.Duration("request-timeout"),
		MaxRetries:           c.Int("retries"),
		MaxConsecutiveErrors: c.Int("max-consecutive-errors"),
		Log:                  log,
	}
	// Zero means "the default" to the library; on the command line it is
	// an explicit request.
	if o.MaxRetries == 0 {
		o.MaxRetries = -1
	}
	if !c.IsSet("concurrency") {
		o.Concurrency = 0 // the library's default: fill the teacher
	}
	if (c.IsSet("concurrency") && o.Concurrency < 1) || o.MaxTokens < 1 || o.N < 1 {
		return fmt.Errorf("data distill: --concurrency, --max-tokens and --n must be at least 1")
	}
	if s := c.String("extra"); s != "" {
		if err := json.Unmarshal([]byte(s), &o.ExtraBody); err != nil {
			return fmt.Errorf("data distill: --extra: want a JSON object: %w", err)
		}
	}
	// Ctrl-C: requests in flight are abandoned, what was answered is
	// already on disk, and a rerun continues.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := data.Distill(ctx, o)
	if st != nil {
		w := c.Root().Writer
		fmt.Fprintf(w, "%s: %d of %d answers (%d prompts x %d); this run wrote %d (%d truncated), %d failed, %d completion tokens in %s\n",
			st.Out, st.Done+st.Written+st.Dropped, st.Responses, st.Prompts, o.N, st.Written, st.Truncated, st.Failed, st.CompletionTokens, st.Elapsed.Round(time.Second))
		if st.Dropped > 0 {
			fmt.Fprintf(w, "  %d truncated answers kept out of the output: %s\n", st.Dropped, st.TruncatedOut)
		}
		if st.Failed > 0 {
			fmt.Fprintf(w, "  failures: %s (run the same command again to retry them)\n", st.Errors)
		}
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("data distill: interrupted; the answers received are in %s: run the same command again to continue", o.Out)
	}
	return err
}
