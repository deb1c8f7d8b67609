package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"dllm/openai"
)

// Options configure Run.
type Options struct {
	// Client is the server to ask.
	Client *openai.Client
	// Items are the questions, in file order.
	Items []Item
	// Chance gives a task's chance level; tasks not in it get
	// 1/len(choices) for multiple choice, else 0.
	Chance map[string]float64
	// Concurrency is the number of requests in flight; default 1.
	Concurrency int
	// Limit keeps the first Limit items of each task; 0 keeps all.
	Limit int
	// Model is the request's model field ("" leaves it out).
	Model string
	// MaxTokens caps each reply, reasoning included; 0 leaves it to the
	// server.
	MaxTokens int
	// Temperature, when set, is sent; 0 is greedy.
	Temperature *float64
	// EnableThinking, when set, is sent as chat_template_kwargs.enable_thinking.
	EnableThinking *bool
	// Seed, when set, is sent with every request, plus the item's Repeat
	// (so the samples of one question differ).
	Seed *int64
	// Extra fields are merged into every request body (e.g. dllm's
	// "threshold").
	Extra map[string]any
	// Journal, when set, is a JSONL file every finished item is appended
	// to: a rerun with the same Settings skips the items it holds.
	Journal string
	// Settings describe the run (model, sampling, ...); a journal holds
	// them, and resumes only a run with the same.
	Settings map[string]any
	// Progress receives a progress line now and then; nil: none.
	Progress io.Writer
	// Terminal redraws the progress line in place instead of printing a
	// line at every tenth of the run.
	Terminal bool
	// Sandbox runs the programs of "tests" items (LiveCodeBench); a run
	// with such items needs one.
	Sandbox *Sandbox
}

// ItemResult is the outcome of one item.
type ItemResult struct {
	ID        string  `json:"id"`
	Task      string  `json:"task"`
	Answer    string  `json:"answer"`
	Got       string  `json:"got"`
	Extracted bool    `json:"extracted"`
	Correct   bool    `json:"correct"`
	Content   string  `json:"content"`
	Reasoning string  `json:"reasoning,omitempty"`
	Finish    string  `json:"finish_reason,omitempty"`
	Tokens    int     `json:"completion_tokens"`
	Steps     int     `json:"steps,omitempty"`
	Checked   int     `json:"checked,omitempty"`
	Accepted  int     `json:"accepted,omitempty"`
	Seconds   float64 `json:"seconds"`
	// Verdict is a program's outcome on its tests ("tests" items).
	Verdict string `json:"verdict,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Limit keeps the first n questions of every task, with their samples
// (n <= 0 keeps all).
func Limit(items []Item, n int) []Item {
	if n <= 0 {
		return items
	}
	// Questions are counted, not samples: a question's samples (Repeat)
	// follow it and go with it.
	count := map[string]int{}
	var out []Item
	for _, it := range items {
		if it.Repeat == 0 {
			count[it.Task]++
		}
		if count[it.Task] <= n {
			out = append(out, it)
		}
	}
	return out
}

// Run asks every item and scores the replies. A request that still fails
// after the client's retries is recorded as a wrong answer with its error;
// a server that stops answering at all ends the run with an error.
func Run(ctx context.Context, o Options) (*Report, error) {
	items := Limit(o.Items, o.Limit)
	if len(items) == 0 {
		return nil, errors.New("eval: no items to run")
	}
	if o.Client == nil {
		return nil, errors.New("eval: no client")
	}
	if err := checkSandbox(ctx, o.Sandbox, items); err != nil {
		return nil, err
	}
	conc := max(o.Concurrency, 1)
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]ItemResult, len(items))
	prog := newProgress(o.Progress, o.Terminal, len(items))
	var j *journal
	done := map[string]ItemResult{}
	if o.Journal != "" {
		var err error
		if j, done, err = openJournal(o.Journal, o.Settings, items); err != nil {
			return nil, err
		}
		defer j.close()
		if len(done) > 0 && o.Progress != nil {
			fmt.Fprintf(o.Progress, "eval: resuming %s: %d of %d items already answered\n", o.Journal, len(done), len(items))
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := ask(ctx, &o, &items[i])
				if err != nil {
					cancel(err)
					continue
				}
				results[i] = r
				if j != nil {
					if err := j.add(r); err != nil {
						cancel(fmt.Errorf("eval: journal %s: %w", o.Journal, err))
					}
				}
				if r.Error != "" && isUnreachable(r.Error) {
					cancel(fmt.Errorf("eval: the server stopped answering: %s", r.Error))
				}
				prog.done(r.Correct)
			}
		}()
	}
feed:
	for i := range items {
		if r, ok := done[items[i].ID]; ok {
			results[i] = r
			prog.done(r.Correct)
			continue
		}
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	prog.finish()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return newReport(items, results, o.Chance, time.Since(start)), nil
}

func isUnreachable(msg string) bool {
	return strings.Contains(msg, "cannot reach") || strings.Contains(msg, "connection refused")
}

// checkSandbox makes sure, before any question is asked, that a run with
// programs to test has a sandbox that works on this machine.
func checkSandbox(ctx context.Context, s *Sandbox, items []Item) error {
	i := slices.IndexFunc(items, func(it Item) bool { return it.Format == FormatTests })
	if i < 0 {
		return nil
	}
	if s == nil {
		return fmt.Errorf("eval: item %s has programs to test and the run has no sandbox", items[i].ID)
	}
	v, err := s.Check(ctx, "print(input())", &CodeTests{Cases: []TestCase{{Input: "ok\n", Output: "ok"}}})
	if err == nil && v.Status != "pass" {
		err = fmt.Errorf("%w: a program that echoes its input got %s", ErrSandbox, v)
	}
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	return nil
}

// ask sends one item and scores the reply. The error is for a failure
// that must stop the run (the sandbox failing), not a wrong answer.
func ask(ctx context.Context, o *Options, it *Item) (ItemResult, error) {
	r := ItemResult{ID: it.ID, Task: it.Task, Answer: it.Answer}
	seed := o.Seed
	if seed != nil && it.Repeat > 0 {
		s := *seed + int64(it.Repeat)
		seed = &s
	}
	req := &openai.ChatRequest{Model: o.Model, Messages: openai.Messages(it.Messages...), MaxTokens: o.MaxTokens, Temperature: o.Temperature, Seed: seed, Extra: o.Extra}
	if o.EnableThinking != nil {
		req.ChatTemplateKwargs = map[string]any{"enable_thinking": *o.EnableThinking}
	}
	t0 := time.Now()
	resp, _, err := o.Client.Chat(ctx, req)
	r.Seconds = time.Since(t0).Seconds()
	if err != nil {
		r.Error = err.Error()
		return r, nil
	}
	ch := resp.Choices[0]
	r.Content, r.Finish = ch.Message.Content, ch.FinishReason
	r.Reasoning = ch.Message.ReasoningContent
	if r.Reasoning == "" {
		r.Reasoning = ch.Message.Reasoning
	}
	if u := resp.Usage; u != nil {
		r.Tokens = u.CompletionTokens
		if u.DLLM != nil {
			r.Steps, r.Checked, r.Accepted = u.DLLM.Steps, u.DLLM.Checked, u.DLLM.Accepted
		}
	}
	r.Got, r.Extracted = ExtractFor(it, r.Content, r.Reasoning)
	if it.Format == FormatTests && r.Extracted {
		v, err := o.Sandbox.Check(ctx, r.Got, it.Tests)
		if err != nil {
			return r, fmt.Errorf("eval: %s: %w", it.ID, err)
		}
		r.Correct, r.Verdict = v.Status == "pass", v.String()
		return r, nil
	}
	r.Correct = r.Extracted && Correct(it, r.Got)
	return r, nil
}

// progress prints "eval: 37/200 (18%), accuracy so far 0.432, 3.1/s, eta 52s".
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	total    int
	n, ok    int
	start    time.Time
	lastTick int
}

func newProgress(w io.Writer, terminal bool, total int) *progress {
	return &progress{w: w, terminal: terminal, total: total, start: time.Now()}
}

func (p *progress) done(correct bool) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if correct {
		p.ok++
	}
	tick := 10 * p.n / p.total
	if !p.terminal && tick == p.lastTick && p.n != p.total {
		return
	}
	p.lastTick = tick
	el := time.Since(p.start).Seconds()
	rate := float64(p.n) / max(el, 1e-9)
	eta := time.Duration(float64(p.total-p.n)/max(rate, 1e-9)) * time.Second
	line := fmt.Sprintf("eval: %d/%d (%d%%), accuracy so far %.3f, %.1f/s, eta %s",
		p.n, p.total, 100*p.n/p.total, float64(p.ok)/float64(p.n), rate, eta.Round(time.Second))
	if p.terminal {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) finish() {
	if p.w != nil && p.terminal {
		fmt.Fprintln(p.w)
	}
}
