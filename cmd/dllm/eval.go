package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"dllm/eval"
	"dllm/openai"
)

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:      "eval",
		Usage:     "score an OpenAI-compatible server on questions with exact answers: an eval file or the published benchmarks",
		UsageText: "dllm eval --server URL (--tasks FILE.jsonl | --suite math-500,gpqa-diamond,mmlu-pro,lcb-v6 [--data DIR]) [--out results.json] [options]",
		Description: `Sends every item of FILE.jsonl ({"id","task","messages","answer","choices"?,
"format"?} per line, as 'dllm data synth' writes heldout.jsonl) to POST
/v1/chat/completions, reads the final answer from the reply ("Answer: X"
in content, else the last one in content or reasoning; format "math": the
last \boxed{}; "program" and "tests": the last code block), scores it
(numbers normalised, choice letters by letter, lists in order, programs
run, math answers by equivalence; docs/eval.md) and prints per task:
accuracy, chance (from tasks.json beside the file, else 1/len(choices) or
0), completion tokens, tokens/s per request, and TPF when the server
reports usage.dllm (dllm serve does). --out writes everything, per item
too, as JSON; --baseline adds the normalised score
100*(accuracy-chance)/(baseline accuracy-chance) against an earlier --out.

--suite reads the published benchmarks from their official files under
--data instead, with the reference harnesses' prompts, and normalises each
against the AR MiniCPM5-2B's score (or --baseline), clamped to 0..100.
With --out, answers are journaled to OUT.partial.jsonl as they come and
the same command resumes a stopped run.

lcb-v6 (and items of format "tests") run the model's programs with python3
in a sandbox: new user, mount, network and PID namespaces (no network, no
writes outside its own directory, nothing left running), a time limit per
test and a memory limit. A machine that refuses the namespaces needs
--unsafe-exec, which keeps only the limits.

Works against any OpenAI-compatible server (dllm serve, vLLM, SGLang).
429 and 503 answers and dropped connections are retried with backoff.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "server", Value: "http://localhost:8000", Usage: "server `URL` (its root or /v1)"},
			&cli.StringFlag{Name: "tasks", Usage: "eval `FILE.jsonl` (or --suite)"},
			&cli.StringFlag{Name: "suite", Usage: "published benchmarks instead of --tasks, comma-separated: math-500, gpqa-diamond, mmlu-pro, lcb-v6 (docs/eval.md)"},
			&cli.IntFlag{Name: "samples", Value: 1, Usage: "answers per question: the score is pass@1 averaged over them (give --temperature > 0)"},
			&cli.StringFlag{Name: "data", Value: "benchmarks", Usage: "`DIR` holding the suites' official files as docs/eval.md downloads them"},
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "requests in flight; not given, the server's max_num_seqs when it reports more (dllm serve --max-num-seqs)"},
			&cli.IntFlag{Name: "max-tokens", Value: 1024, Usage: "cap on each reply, reasoning included (0: the server's default; 32768 with --suite unless given)"},
			&cli.FloatFlag{Name: "temperature", Value: 0, Usage: "sampling temperature; 0 is greedy"},
			&cli.FloatFlag{Name: "top-p", Usage: "nucleus sampling's top_p, sent when given"},
			&cli.BoolFlag{Name: "enable-thinking", Value: true, Usage: "chat_template_kwargs.enable_thinking"},
			&cli.StringFlag{Name: "model", Usage: "the request's model (default: the server's first in /v1/models)"},
			&cli.StringFlag{Name: "out", Usage: "write the results as JSON to `FILE`"},
			&cli.IntFlag{Name: "limit", Usage: "first N items of each task (0: all)"},
			&cli.Int64Flag{Name: "seed", Usage: "seed sent with every request"},
			&cli.FloatFlag{Name: "threshold", Usage: "dllm serve's denoising threshold in (0, 1] (default: the model's)"},
			&cli.StringFlag{Name: "extra", Usage: "JSON object of more request fields, e.g. '{\"top_p\":0.9}'"},
			&cli.StringFlag{Name: "baseline", Usage: "an earlier --out `FILE` (the AR model's): adds normalised scores"},
			&cli.StringFlag{Name: "api-key", Sources: cli.EnvVars("OPENAI_API_KEY"), Usage: "bearer token, if the server wants one"},
			&cli.DurationFlag{Name: "request-timeout", Value: 10 * time.Minute, Usage: "limit on one request"},
			&cli.IntFlag{Name: "retries", Value: 5, Usage: "retries after 429/503 or a dropped connection"},
			&cli.StringFlag{Name: "lcb-window", Value: eval.LCBv6.String(), Usage: "lcb-v6's problems by contest date, `FROM:TO` (TO excluded); the default is v6's release"},
			&cli.StringFlag{Name: "python", Value: "python3", Usage: "the interpreter that runs the programs of lcb-v6"},
			&cli.DurationFlag{Name: "code-timeout", Value: 6 * time.Second, Usage: "wall-clock limit of a program on one test (lcb_runner's)"},
			&cli.FloatFlag{Name: "code-memory-gb", Value: 4, Usage: "memory (address space) limit of a program, GiB"},
			&cli.BoolFlag{Name: "unsafe-exec", Usage: "run the programs without the sandbox's namespaces, where the machine refuses them: they can reach the network and write files"},
		},
		Action:   runEval,
		Commands: []*cli.Command{evalSummaryCommand()},
	}
}

func evalSummaryCommand() *cli.Command {
	return &cli.Command{
		Name:      "summary",
		Usage:     "summarise several --out results of one eval (seeds of a recipe): each task's mean ± standard deviation",
		UsageText: "dllm eval summary [--json | --brief] [--gate ACCURACY] RESULTS.json...",
		Description: `Reads results written by 'dllm eval --out' for the same items (runs with other
seeds, say) and prints per task the mean and sample standard deviation over
them of the accuracy, the normalised score (results made with --baseline),
TPF and the share of replies without an answer; then the mean normalised
score over runs and each run's worst task.

--gate checks a teacher before its conversion is judged against it: after
the summary, the command fails (exit status 1), naming them, when any task
of any file has an accuracy under the gate.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON"},
			&cli.BoolFlag{Name: "brief", Usage: "print one line for scripts: MEAN_NORMALISED SD TPF WORST_TASK RUNS"},
			&cli.FloatFlag{Name: "gate", Usage: "fail when a task's accuracy in any file is under this (0-1; 0: no gate)"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			paths := c.Args().Slice()
			if len(paths) == 0 {
				return fmt.Errorf("eval summary: give the results files (dllm eval --out) to summarise")
			}
			gate := c.Float("gate")
			if gate < 0 || gate > 1 {
				return fmt.Errorf("eval summary: --gate is an accuracy between 0 and 1, not %g", gate)
			}
			var reports []*eval.Report
			for _, p := range paths {
				r, err := eval.ReadReport(p)
				if err != nil {
					return err
				}
				reports = append(reports, r)
			}
			s := eval.Summarize(reports)
			switch {
			case c.Bool("json"):
				b, err := json.MarshalIndent(s, "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintln(c.Root().Writer, string(b))
			case c.Bool("brief"):
				fmt.Fprintf(c.Root().Writer, "%.2f %.2f %.2f %.2f %d\n", s.MeanNormalized.Mean, s.MeanNormalized.SD, s.Overall.TPF.Mean, s.MinTaskNormalized.Mean, s.Runs)
			default:
				s.PrintTable(c.Root().Writer)
			}
			if gate == 0 {
				return nil
			}
			var under []string
			for _, f := range eval.BelowGate(reports, gate) {
				under = append(under, fmt.Sprintf("%s %.3g (%s)", f.Task, f.Accuracy, paths[f.Report]))
			}
			if len(under) > 0 {
				return fmt.Errorf("eval summary: under the gate of %g: %s", gate, strings.Join(under, ", "))
			}
			return nil
		},
	}
}

// suiteMaxTokens is --max-tokens for the benchmarks: reasoning models'
// replies run to tens of thousands of tokens, and a reply cut short scores
// as wrong.
const suiteMaxTokens = 32768

func runEval(ctx context.Context, c *cli.Command) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	path, suite, samples := c.String("tasks"), c.String("suite"), c.Int("samples")
	if samples < 1 {
		return fmt.Errorf("eval: --samples %d: want at least 1", samples)
	}
	window, err := eval.ParseWindow(c.String("lcb-window"))
	if err != nil {
		return fmt.Errorf("eval: --lcb-window: %w", err)
	}
	var (
		items  []eval.Item
		chance map[string]float64
		base   *eval.Report // the AR original's scores: the suites' table or --baseline
	)
	switch {
	case path != "" && suite != "":
		return fmt.Errorf("eval: give --tasks or --suite, not both")
	case suite != "":
		if items, chance, base, err = eval.LoadSuites(strings.Split(suite, ","), c.String("data"), eval.SuiteOptions{Samples: samples, LCBWindow: window}); err != nil {
			return err
		}
		path = suite
	case path == "":
		return fmt.Errorf("eval: --tasks FILE.jsonl or --suite NAMES is required (or: dllm eval summary RESULTS.json...)")
	default:
		if items, err = eval.LoadItems(path); err != nil {
			return err
		}
		items = eval.Repeat(items, samples, nil)
		info, err := eval.LoadTaskInfo(path)
		if err != nil {
			return err
		}
		chance = map[string]float64{}
		for name, t := range info {
			chance[name] = t.Chance
		}
	}
	o := eval.Options{Items: items, Chance: chance, Concurrency: c.Int("concurrency"), Limit: c.Int("limit"), MaxTokens: c.Int("max-tokens")}
	if suite != "" && !c.IsSet("max-tokens") {
		o.MaxTokens = suiteMaxTokens
	}
	if o.Concurrency < 1 {
		return fmt.Errorf("eval: --concurrency %d: want at least 1", o.Concurrency)
	}
	if o.MaxTokens < 0 || o.Limit < 0 {
		return fmt.Errorf("eval: --max-tokens and --limit must not be negative")
	}
	temp := c.Float("temperature")
	think := c.Bool("enable-thinking")
	o.Temperature, o.EnableThinking = &temp, &think
	if c.IsSet("seed") {
		s := c.Int64("seed")
		o.Seed = &s
	}
	if s := c.String("extra"); s != "" {
		if err := json.Unmarshal([]byte(s), &o.Extra); err != nil {
			return fmt.Errorf("eval: --extra: want a JSON object: %w", err)
		}
	}
	// --top-p and --threshold, both in (0, 1], go into the requests.
	for flag, field := range map[string]string{"top-p": "top_p", "threshold": "threshold"} {
		if !c.IsSet(flag) {
			continue
		}
		v := c.Float(flag)
		if v <= 0 || v > 1 {
			return fmt.Errorf("eval: --%s %g: want (0, 1]", flag, v)
		}
		if o.Extra == nil {
			o.Extra = map[string]any{}
		}
		o.Extra[field] = v
	}
	if b := c.String("baseline"); b != "" {
		if base, err = eval.ReadReport(b); err != nil {
			return err
		}
	}

	cl, err := openai.New(c.String("server"))
	if err != nil {
		return fmt.Errorf("eval: --server: %w", err)
	}
	cl.APIKey, cl.Retries = c.String("api-key"), c.Int("retries")
	cl.AttemptTimeout = c.Duration("request-timeout")
	models, err := cl.Models(ctx)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	o.Model = c.String("model")
	if o.Model == "" && len(models) > 0 {
		o.Model = models[0].ID
	}
	if !c.IsSet("concurrency") {
		o.Concurrency = openai.FillConcurrency(models, o.Concurrency)
	}
	o.Client = cl
	log := c.Root().ErrWriter
	if log == nil {
		log = os.Stderr
	}
	if f, ok := log.(*os.File); ok {
		o.Terminal = term.IsTerminal(int(f.Fd()))
	}
	o.Progress = log
	n := len(eval.Limit(items, o.Limit))
	fmt.Fprintf(log, "eval: %d items of %s against %s (model %q), concurrency %d\n", n, path, c.String("server"), o.Model, o.Concurrency)
	// With --out, every answer also goes to OUT.partial.jsonl as it comes:
	// a run stopped on the way resumes from it, and it is removed once OUT
	// is written.
	out := c.String("out")
	o.Settings = map[string]any{"items": path, "model": o.Model, "max_tokens": o.MaxTokens, "temperature": temp,
		"enable_thinking": think, "samples": samples, "limit": o.Limit, "extra": o.Extra}
	if o.Seed != nil {
		o.Settings["seed"] = *o.Seed
	}
	if slices.ContainsFunc(items, func(it eval.Item) bool { return it.Format == eval.FormatTests }) {
		sb := eval.NewSandbox()
		sb.Python, sb.Timeout, sb.Unsafe = c.String("python"), c.Duration("code-timeout"), c.Bool("unsafe-exec")
		sb.Memory = int64(c.Float("code-memory-gb") * (1 << 30))
		if sb.Timeout <= 0 || sb.Memory <= 0 {
			return fmt.Errorf("eval: --code-timeout and --code-memory-gb must be positive")
		}
		o.Sandbox = sb
		o.Settings["code_timeout_s"], o.Settings["code_memory_gb"] = sb.Timeout.Seconds(), c.Float("code-memory-gb")
		if strings.Contains(suite, "lcb-v6") {
			o.Settings["lcb_window"] = window.String()
		}
		if sb.Unsafe {
			fmt.Fprintln(log, "eval: --unsafe-exec: the model's programs run without the sandbox's namespaces")
		}
	}
	if out != "" {
		o.Journal = out + ".partial.jsonl"
	}
	rep, err := eval.Run(ctx, o)
	if err != nil {
		if o.Journal != "" {
			return fmt.Errorf("%w (the answers so far are in %s: run the same command again to resume)", err, o.Journal)
		}
		return err
	}
	rep.Server, rep.Model, rep.File = c.String("server"), o.Model, path
	rep.Settings = maps.Clone(o.Settings)
	rep.Settings["concurrency"] = o.Concurrency
	if base != nil {
		rep.CompareTo(base)
		if suite != "" {
			rep.ClampNormalized()
		}
	}
	rep.PrintTable(c.Root().Writer)
	if out != "" {
		if err := rep.WriteJSON(out); err != nil {
			return err
		}
		if err := os.Remove(o.Journal); err != nil {
			return fmt.Errorf("eval: wrote %s, but %w", out, err)
		}
		fmt.Fprintf(log, "eval: wrote %s\n", out)
	}
	return nil
}
