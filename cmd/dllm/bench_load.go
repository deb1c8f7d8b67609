package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/urfave/cli/v3"

	"dllm/serve/api"
	"dllm/serve/loadgen"
)

func benchLoadCommand() *cli.Command {
	return &cli.Command{
		Name:      "load",
		Usage:     "drive a running server with many concurrent clients: latency, errors, fairness, resource use",
		UsageText: "dllm bench load --server URL [--clients 64] [--duration 3m] [--max-tokens 16] [--json]",
		Description: `Each client sends one request after another: whole and streamed chat
completions, text completions, requests it abandons (mid-stream or while
queued), malformed requests (bad JSON or UTF-8, wrong content type, bad
fields, a prompt longer than the context, a body over 4 MiB, unknown routes)
and health checks. Every answer is checked against what the request called
for. A 503 (queue full) must carry Retry-After; its client retries after
20-100 ms to keep the queue full.

After a warm-up, the load runs in two halves. Against dllm serve
--debug-stats the server's goroutines, heap, RSS, open files and live tensors
are sampled during the load and when idle (after a GC) before, between and
after the halves, and whole responses carry their queue order, which must be
the arrival order. Exits non-zero on any unexpected answer or queue-order
inversion. See docs/reliability.md. For throughput (tokens/s of N
streaming clients at once, as a batching server runs them) use dllm bench
decode --server URL --clients N.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "server", Value: "http://127.0.0.1:8000", Usage: "server base `URL`"},
			&cli.IntFlag{Name: "clients", Value: 64, Usage: "concurrent clients"},
			&cli.DurationFlag{Name: "duration", Value: 3 * time.Minute, Usage: "time under load (warm-up excluded)"},
			&cli.DurationFlag{Name: "warmup", Usage: "unmeasured load first (default: a tenth of --duration, at most 10s)"},
			&cli.IntFlag{Name: "max-tokens", Value: 16, Usage: "cap on each generation"},
			&cli.StringFlag{Name: "model", Usage: "model name to send (default: the server's first)"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the request mix"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: benchLoad,
	}
}

func benchLoad(ctx context.Context, c *cli.Command) error {
	if c.Int("clients") < 1 || c.Duration("duration") <= 0 || c.Int("max-tokens") < 1 {
		return fmt.Errorf("--clients, --duration and --max-tokens must be positive")
	}
	w := c.Root().Writer
	cfg := loadgen.Config{
		URL: c.String("server"), Clients: c.Int("clients"), Duration: c.Duration("duration"), Warmup: c.Duration("warmup"),
		MaxTokens: c.Int("max-tokens"), Model: c.String("model"), Seed: c.Uint64("seed"),
		Progress: c.Root().ErrWriter,
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printLoadReport(w, cfg, rep)
	}
	if rep.Unexpected > 0 || rep.FIFOInversions > 0 {
		return fmt.Errorf("load: %d unexpected answers, %d queue-order inversions", rep.Unexpected, rep.FIFOInversions)
	}
	return nil
}

func printLoadReport(w io.Writer, cfg loadgen.Config, rep *loadgen.Report) {
	secs := rep.Duration.Seconds()
	fmt.Fprintf(w, "%d clients for %s against %s: %d requests (%.1f/s)\n\n", rep.Clients, rep.Duration.Round(time.Second), cfg.URL, rep.Requests, float64(rep.Requests)/secs)
	var statuses []int
	for _, k := range rep.Kinds {
		for s := range k.Statuses {
			if !slices.Contains(statuses, s) {
				statuses = append(statuses, s)
			}
		}
	}
	slices.Sort(statuses)
	fmt.Fprintf(w, "%-13s %8s", "kind", "requests")
	for _, s := range statuses {
		name := strconv.Itoa(s)
		if s == 0 {
			name = "none"
		}
		fmt.Fprintf(w, " %6s", name)
	}
	fmt.Fprintf(w, " %9s %9s\n", "p50_ms", "p99_ms")
	var kinds []string
	for k := range rep.Kinds {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, name := range kinds {
		k := rep.Kinds[name]
		fmt.Fprintf(w, "%-13s %8d", name, k.Requests)
		for _, s := range statuses {
			fmt.Fprintf(w, " %6d", k.Statuses[s])
		}
		fmt.Fprintf(w, " %9.1f %9.1f\n", k.Latency.P50, k.Latency.P99)
	}
	g := rep.Generation
	fmt.Fprintf(w, "\ngenerations answered in full: %d (%.1f/s); latency p50 %.1f ms, p90 %.1f, p99 %.1f, max %.1f (queueing included)\n",
		g.N, float64(g.N)/secs, g.P50, g.P90, g.P99, g.Max)
	if k := rep.Kinds[loadgen.KindStream]; k != nil && k.FirstToken.N > 0 {
		fmt.Fprintf(w, "streams: first text p50 %.1f ms, p99 %.1f\n", k.FirstToken.P50, k.FirstToken.P99)
	}
	fmt.Fprintf(w, "overloaded (503): %d, %d of them without Retry-After\n", rep.Overloaded, rep.NoRetryAfter)
	fmt.Fprintf(w, "unexpected answers: %d\n", rep.Unexpected)
	for _, e := range rep.Examples {
		fmt.Fprintf(w, "  %s\n", e)
	}
	if rep.FIFOChecked > 0 {
		fmt.Fprintf(w, "queue order: %d whole responses checked, %d served out of arrival order\n", rep.FIFOChecked, rep.FIFOInversions)
	} else {
		fmt.Fprintln(w, "queue order: not checked (the server does not report it; run dllm serve --debug-stats)")
	}
	if len(rep.Samples) == 0 {
		fmt.Fprintln(w, "server resources: not sampled (run dllm serve --debug-stats)")
		return
	}
	fmt.Fprintln(w, "\nserver, idle after a GC:")
	phases := []string{"start", "middle", "end"}
	fmt.Fprintf(w, "%-16s", "")
	for _, p := range phases {
		fmt.Fprintf(w, " %10s", p)
	}
	fmt.Fprintln(w)
	rows := []struct {
		name string
		f    func(api.DebugStats) string
	}{
		{"goroutines", func(s api.DebugStats) string { return strconv.Itoa(s.Goroutines) }},
		{"heap in use MiB", func(s api.DebugStats) string { return fmt.Sprintf("%.1f", float64(s.HeapInuse)/(1<<20)) }},
		{"RSS MiB", func(s api.DebugStats) string { return fmt.Sprintf("%.1f", float64(s.RSS)/(1<<20)) }},
		{"open files", func(s api.DebugStats) string { return strconv.Itoa(s.OpenFDs) }},
		{"live tensors", func(s api.DebugStats) string { return strconv.FormatInt(s.LiveTensors, 10) }},
	}
	for _, row := range rows {
		fmt.Fprintf(w, "%-16s", row.name)
		for _, p := range phases {
			v := "-"
			if st, ok := rep.Idle(p); ok {
				v = row.f(st)
			}
			fmt.Fprintf(w, " %10s", v)
		}
		fmt.Fprintln(w)
	}
	var peak int64
	var maxG int
	for _, s := range rep.Samples {
		peak, maxG = max(peak, s.Stats.RSSPeak), max(maxG, s.Stats.Goroutines)
	}
	fmt.Fprintf(w, "under load: at most %d goroutines; peak RSS %.1f MiB\n", maxG, float64(peak)/(1<<20))
}
