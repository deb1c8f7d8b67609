package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"dllm/serve"
	"dllm/torch"
	"dllm/train"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "serve a dllm model over an OpenAI-compatible HTTP API",
		UsageText: "dllm serve --model DIR [--host 0.0.0.0] [--port 8000] [--device auto|cpu|cuda] [options]",
		Description: `Serves POST /v1/chat/completions, POST /v1/completions, GET /v1/models and
GET /health. The server listens at once and answers 503 until the model is
loaded; requests then run one at a time through a FIFO queue. SIGINT or
SIGTERM stops it: in-flight requests get a few seconds, then are cancelled.
See docs/serve.md.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "dllm model `DIR` (made by dllm convert)", Required: true},
			&cli.StringFlag{Name: "host", Value: "0.0.0.0", Usage: "address to listen on"},
			&cli.IntFlag{Name: "port", Value: 8000, Usage: "port to listen on (0 picks a free one)"},
			&cli.StringFlag{Name: "device", Value: "auto", Usage: "auto (the GPU if there is one), cpu, cuda or cuda:N"},
			&cli.StringFlag{Name: "dtype", Value: "auto", Usage: "weight and compute dtype: bf16, f16 or f32; auto is bf16 on a GPU, f32 on the CPU"},
			&cli.IntFlag{Name: "max-queue", Value: 16, Usage: "requests that may wait behind the running ones; more get 503"},
			&cli.IntFlag{Name: "max-num-seqs", Usage: "requests generated at once; above 1 they denoise together in one batch (continuous batching), each in a KV cache slot of the whole context (default: 64 on a GPU, as many of them as the KV cache fits; 1 on the CPU)"},
			&cli.FloatFlag{Name: "kv-cache-gb", Usage: "cap on the batch's KV cache in GiB: fewer than --max-num-seqs run at once when their slots need more (default: on a GPU, the memory free after the weights less 3 GiB)"},
			&cli.IntFlag{Name: "max-num-batched-tokens", Value: 8192, Usage: "most tokens in one batched forward: blocks, and prompts in chunks of 512"},
			&cli.DurationFlag{Name: "request-timeout", Value: 10 * time.Minute, Usage: "limit on one request, queueing included (0: none)"},
			&cli.DurationFlag{Name: "shutdown-grace", Value: serve.DefaultShutdownGrace, Usage: "on SIGINT/SIGTERM, how long requests in flight may run on before they are cancelled"},
			&cli.StringFlag{Name: "served-model-name", Usage: "model id in the API (default: the directory's name)"},
			&cli.IntFlag{Name: "max-model-len", Usage: "context length: prompt plus generated tokens (default: the model's max_position_embeddings)"},
			&cli.IntFlag{Name: "default-max-tokens", Value: serve.DefaultChatMaxTokens, Usage: "a chat request's max_tokens when it gives none"},
			&cli.IntFlag{Name: "max-messages", Value: serve.DefaultMaxMessages, Usage: "most messages one chat request may hold; more get 400"},
			&cli.IntFlag{Name: "max-request-bytes", Value: serve.DefaultMaxBodyBytes, Usage: "largest request body, and so prompt, in bytes; larger get 413"},
			&cli.IntFlag{Name: "max-connections", Value: serve.DefaultMaxConnections, Usage: "most open client connections (lowered to fit the open-file limit); at the limit idle ones are closed"},
			&cli.StringFlag{Name: "api-key", Sources: cli.EnvVars("DLLM_API_KEY"), Usage: "require this key (Authorization: Bearer KEY) on every route but /health; see also --api-key-file"},
			&cli.StringFlag{Name: "api-key-file", Usage: "read the API key from the first line of `FILE`, which keeps it out of ps and the environment"},
			&cli.BoolFlag{Name: "verify", Value: true, Usage: "while loading, check the weights against dllm.json's weights_sha256 and for NaN/Inf (about one sha256 pass over the files, beside the load); --verify=false skips it"},
			&cli.BoolFlag{Name: "no-warmup", Usage: "skip the warm-up before reporting ready (a short generation; on a GPU the KV cache and graphs of the whole context)"},
			&cli.BoolFlag{Name: "log-json", Usage: "log JSON lines instead of text"},
			&cli.BoolFlag{Name: "debug-stats", Usage: "serve GET /debug/stats (goroutines, memory, open files, live tensors) for load tests"},
		}, decoderFlags()...),
		Action: runServe,
	}
}

func runServe(ctx context.Context, c *cli.Command) error {
	// Caught from the start, so that a stop while checking the model still
	// exits cleanly (status 0) rather than by the signal.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	if c.Bool("log-json") {
		h = slog.NewJSONHandler(os.Stderr, nil)
	}
	log := slog.New(h)

	dir := c.String("model")
	name := c.String("served-model-name")
	if name == "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		name = filepath.Base(abs)
	}
	port := c.Int("port")
	if port < 0 || port > 65535 {
		return fmt.Errorf("--port %d is not a port number", port)
	}
	if c.Duration("shutdown-grace") <= 0 {
		return fmt.Errorf("--shutdown-grace must be positive")
	}
	if c.Int("max-queue") < 0 {
		return fmt.Errorf("--max-queue must be at least 0")
	}
	if (c.IsSet("max-num-seqs") && c.Int("max-num-seqs") < 1) || c.Int("max-num-batched-tokens") < 1 || c.Float("kv-cache-gb") < 0 {
		return fmt.Errorf("--max-num-seqs and --max-num-batched-tokens must be at least 1, --kv-cache-gb at least 0")
	}
	if c.Int("max-messages") < 1 || c.Int("max-request-bytes") < 1024 || c.Int("max-connections") < 1 {
		return fmt.Errorf("--max-messages and --max-connections must be at least 1, --max-request-bytes at least 1024")
	}
	apiKey, err := readAPIKey(c.String("api-key"), c.String("api-key-file"))
	if err != nil {
		return err
	}
	if d := c.String("dtype"); d != "auto" {
		if _, err := computeDType(d); err != nil {
			return err
		}
	}
	// Everything cheap is checked before listening, so a bad model or a
	// missing GPU is an immediate error rather than a server that never
	// becomes ready.
	checked, err := serve.Check(dir)
	if hint := train.DirHint(dir); err != nil && hint != "" {
		err = errors.New(hint)
	}
	if err != nil {
		return fmt.Errorf("model %s: %w", dir, err)
	}
	if err := torch.Load(); err != nil {
		return err
	}
	dev, err := pickDevice(c.String("device"))
	if err != nil {
		return err
	}
	dt, err := resolveDType(c.String("dtype"), dev)
	if err != nil {
		return err
	}

	if ctx.Err() != nil {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(c.String("host"), strconv.Itoa(port)))
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("port %d is already in use by another program (%w); stop it or choose another --port", port, err)
	}
	if err != nil {
		return err
	}
	log.Info("listening; loading the model", "url", serve.URL(ln.Addr()), "model", dir, "device", dev.String(), "dtype", dt.String())
	cfg := serve.Config{
		ModelName:        name,
		MaxQueue:         c.Int("max-queue"),
		MaxMessages:      c.Int("max-messages"),
		MaxConnections:   c.Int("max-connections"),
		MaxBodyBytes:     int64(c.Int("max-request-bytes")),
		RequestTimeout:   c.Duration("request-timeout"),
		DefaultMaxTokens: c.Int("default-max-tokens"),
		Logger:           log,
		DebugStats:       c.Bool("debug-stats"),
		ShutdownGrace:    c.Duration("shutdown-grace"),
		APIKey:           apiKey,
	}
	if c.Bool("verify") && len(checked.Settings.WeightsSHA256) == 0 {
		log.Info("dllm.json records no weights_sha256 (converted with --hash fast, or by an older dllm): the weights are checked for NaN/Inf only")
	}
	opts := serve.LoadOptions{Device: dev, DType: dt, MaxModelLen: c.Int("max-model-len"), Warmup: !c.Bool("no-warmup"), Verify: c.Bool("verify"),
		NoNormFold: c.Bool("no-norm-fold"), NoPersistentKernel: c.Bool("no-persistent-kernel"),
		MaxNumSeqs: c.Int("max-num-seqs"), KVCacheGB: c.Float("kv-cache-gb"), MaxNumBatchedTokens: c.Int("max-num-batched-tokens")}
	return serve.Run(ctx, ln, cfg, func(ctx context.Context) (*serve.Model, error) {
		return checked.Load(ctx, opts)
	})
}

// readAPIKey is --api-key, or the first line of --api-key-file.
func readAPIKey(key, file string) (string, error) {
	if file == "" {
		return key, nil
	}
	if key != "" {
		return "", fmt.Errorf("give the API key once: --api-key (or DLLM_API_KEY) or --api-key-file, not both")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--api-key-file: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	if key = strings.TrimSpace(line); key == "" {
		return "", fmt.Errorf("--api-key-file %s: the first line is empty; it should hold the key", file)
	}
	return key, nil
}
