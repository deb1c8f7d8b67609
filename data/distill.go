package data

// Self-distillation: ask a teacher (any OpenAI-compatible chat endpoint:
// `dllm serve` on the original checkpoint with blocks of 1, vLLM, SGLang)
// to answer a file of prompts with its reasoning, and write the answers as
// chat JSONL that `dllm data prepare` reads as a chat source. Training on
// the original model's own outputs is the cheapest way to keep its
// behaviour through the conversion.
//
// The run is built to be left alone for days: requests go out
// concurrently, transient failures are retried with backoff, a prompt the
// teacher refuses is logged and skipped, and an interrupted run (Ctrl-C, a
// crash, a lost machine) continues where it stopped when started again.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"dllm/openai"
)

// DistillOptions configure Distill. Zero values take the defaults named on
// each field, except Temperature, TopP and EnableThinking, whose zero
// values are meaningful (the CLI's defaults are 0.6, 0.95 and true).
type DistillOptions struct {
	// Teacher is the endpoint: a base URL (http://host:8000), its /v1, or
	// the full /v1/chat/completions URL. Required.
	Teacher string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// Model is the model name sent to the teacher; "" asks its /v1/models
	// and takes the first.
	Model string

	// Prompts is the prompts file, or a glob of them (read in sorted
	// order): JSONL of {"id", "messages"} or {"id", "prompt"} (also
	// ShareGPT "conversations"), or Parquet or Arrow files whose
	// PromptField column holds messages or prompt text. Required.
	Prompts string
	// PromptField is the JSON key or column holding the prompt. "" (default)
	// means messages, conversations or prompt for JSONL, whichever is
	// present, and messages for Parquet and Arrow.
	PromptField string
	// Limit uses only the first Limit distinct prompts; 0 means all.
	Limit int

	// Out is the output JSONL. Default: the prompts file's name with
	// ".distilled.jsonl". Failures go to OUT's name with ".errors.jsonl",
	// dropped truncated answers to ".truncated.jsonl" (DistillSidePaths).
	Out string

	// Concurrency is the number of requests in flight. Default 8, or the
	// teacher's max_num_seqs when its /v1/models reports more (dllm serve
	// --max-num-seqs), so that a batching teacher is kept full.
	Concurrency int
	// MaxTokens bounds each answer, reasoning included. Default 8192.
	MaxTokens int
	// Temperature is sent as is; TopP only when > 0.
	Temperature, TopP float64
	// EnableThinking is sent as chat_template_kwargs.enable_thinking.
	EnableThinking bool
	// N is the number of answers per prompt, each its own request (servers
	// differ on the "n" field; ours allows only 1). Default 1.
	N int
	// DropTruncated keeps answers cut at MaxTokens out of Out (they go to
	// the .truncated.jsonl file, so a rerun does not ask again). Without it
	// they are written to Out with "truncated": true.
	DropTruncated bool
	// ExtraBody is merged into every request (top_k, min_p, seed…).
	ExtraBody map[string]any

	// MaxRetries bounds the retries of one request after a connection
	// error, a timeout, 408, 429 or 5xx. Default 8; negative: none.
	MaxRetries int
	// RetryWait is the first wait between attempts, doubled each time (with
	// jitter) up to MaxRetryWait. Defaults 1 s and 1 min. A Retry-After
	// header is honoured up to 10 minutes.
	RetryWait, MaxRetryWait time.Duration
	// RequestTimeout bounds one attempt. Default 30 min: a long reasoning
	// answer from a busy server takes many minutes.
	RequestTimeout time.Duration
	// MaxConsecutiveErrors stops the run when that many prompts in a row
	// fail for good (a wrong URL, model or key fails every one). Default
	// 50; negative never stops.
	MaxConsecutiveErrors int
	// SyncEvery is the number of records written between fsyncs (they are
	// also synced every 2 seconds and at the end). Default 16.
	SyncEvery int
	// ProgressEvery spaces the progress lines. Default 10 s.
	ProgressEvery time.Duration

	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Client is the HTTP client; nil uses a fresh one sized to Concurrency.
	Client *http.Client
}

// DistillStats summarises a Distill run.
type DistillStats struct {
	// Prompts is the number of distinct prompts used; Responses the number
	// of answers asked for in all (Prompts x N).
	Prompts, Responses int
	// Done is the number already in the output before this run.
	Done int
	// Written is the number of answers this run added to Out; Truncated of
	// those (or of Dropped) the answers cut at MaxTokens.
	Written, Truncated, Dropped int
	// Failed is the number of answers that failed for good this run (in the
	// errors file); a rerun asks for them again.
	Failed int
	// CompletionTokens is the sum of the teacher's completion_tokens.
	CompletionTokens int64
	// RepairedBytes is the size of the partial last line removed from Out
	// (left by a crash).
	RepairedBytes int64
	// Out, Errors and TruncatedOut are the files used.
	Out, Errors, TruncatedOut string
	Elapsed                   time.Duration
}

// DistillSidePaths returns the errors and truncated files that go with the
// output file out: out.jsonl -> out.errors.jsonl, out.truncated.jsonl.
func DistillSidePaths(out string) (errorsPath, truncatedPath string) {
	stem := strings.TrimSuffix(out, ".jsonl")
	return stem + ".errors.jsonl", stem + ".truncated.jsonl"
}

// defaultDistillOut is the output next to the prompts file.
func defaultDistillOut(prompts string) string {
	base := prompts
	for _, ext := range []string{".gz", ".jsonl", ".json", ".ndjson", ".parquet", ".arrow"} {
		base = strings.TrimSuffix(base, ext)
	}
	return base + ".distilled.jsonl"
}

func (o *DistillOptions) setDefaults() {
	if o.Out == "" && o.Prompts != "" && !strings.ContainsAny(o.Prompts, "*?[") {
		o.Out = defaultDistillOut(o.Prompts)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.MaxTokens, 8192)
	def(&o.N, 1)
	def(&o.MaxRetries, 8)
	def(&o.MaxConsecutiveErrors, 50)
	def(&o.SyncEvery, 16)
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defDur(&o.RetryWait, time.Second)
	defDur(&o.MaxRetryWait, time.Minute)
	defDur(&o.RequestTimeout, 30*time.Minute)
	defDur(&o.ProgressEvery, 10*time.Second)
}

func (o *DistillOptions) validate() error {
	var errs []string
	if o.Teacher == "" {
		errs = append(errs, "a teacher URL is required (--teacher)")
	}
	if o.Prompts == "" {
		errs = append(errs, "a prompts file is required (--prompts)")
	}
	if o.Concurrency < 0 || o.MaxTokens < 1 || o.N < 1 || o.Limit < 0 || o.SyncEvery < 1 {
		errs = append(errs, "max tokens, n and sync-every must be at least 1, concurrency and limit not negative")
	}
	if o.Temperature < 0 || o.TopP < 0 || o.TopP > 1 {
		errs = append(errs, fmt.Sprintf("temperature %v / top_p %v: want temperature >= 0 and 0 < top_p <= 1", o.Temperature, o.TopP))
	}
	if o.Out == "" && strings.ContainsAny(o.Prompts, "*?[") {
		errs = append(errs, "an output file is required (--out) when the prompts are a pattern")
	}
	if o.Out != "" && o.Out == o.Prompts {
		errs = append(errs, "the output file must not be the prompts file")
	}
	if len(errs) > 0 {
		return fmt.Errorf("data: distill: %s", strings.Join(errs, "; "))
	}
	return nil
}

// distillPrompt is one prompt: its id and its messages, ending with the
// last user turn.
type distillPrompt struct {
	id       string
	messages []json.RawMessage
}

// distillJob is one answer to ask for: prompt p, sample k.
type distillJob struct {
	p      *distillPrompt
	sample int
}

// distillKey identifies an answer in the output: the prompt id and the
// sample number (absent = 0).
func distillKey(id string, sample int) string { return id + "\x00" + strconv.Itoa(sample) }

// Distill asks the teacher for an answer to every prompt (N each) not yet
// in the output, and appends them to it. Records are written in the order
// answers arrive, not the prompts' order; a rerun skips the ids already
// written, after cutting off a partial last line left by a crash.
func Distill(ctx context.Context, o DistillOptions) (*DistillStats, error) {
	o.setDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	// Each file the pattern matches is checked again as it is read.
	if err := CheckNotEvalSet("data: distill: prompts", o.Prompts); err != nil {
		return nil, err
	}
	api, err := openai.New(o.Teacher)
	if err != nil {
		return nil, fmt.Errorf("data: distill: teacher: %w", err)
	}
	api.APIKey, api.Retries, api.AttemptTimeout = o.APIKey, max(o.MaxRetries, 0), o.RequestTimeout
	api.Backoff, api.MaxBackoff = o.RetryWait, o.MaxRetryWait
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "distill: "+format+"\n", args...)
		}
	}
	prompts, err := loadDistillPrompts(ctx, o.Prompts, o.PromptField, o.Limit, logf)
	if err != nil {
		return nil, err
	}
	st := &DistillStats{Prompts: len(prompts), Responses: len(prompts) * o.N, Out: o.Out}
	st.Errors, st.TruncatedOut = DistillSidePaths(o.Out)
	if dir := filepath.Dir(o.Out); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("data: distill: %w", err)
		}
	}
	// Two runs appending to one file would interleave their lines.
	unlock, err := lockFile(o.Out)
	if err != nil {
		return nil, fmt.Errorf("data: distill: %s: %w", o.Out, err)
	}
	defer unlock()

	// What is there already: the output (and the dropped truncated
	// answers), each cut back to its last whole line.
	done := map[string]bool{}
	addKey := func(line []byte) error {
		var r struct {
			ID     *string `json:"id"`
			Sample int     `json:"sample"`
		}
		if err := json.Unmarshal(line, &r); err != nil || r.ID == nil {
			return fmt.Errorf("not a distill record (want a JSON object with a string \"id\")")
		}
		done[distillKey(*r.ID, r.Sample)] = true
		return nil
	}
	if st.RepairedBytes, err = repairJSONL(o.Out, addKey); err != nil {
		return nil, err
	}
	if st.RepairedBytes > 0 {
		logf("%s: removed a partial last line of %d bytes left by an interrupted run", o.Out, st.RepairedBytes)
	}
	truncKeys := addKey
	if !o.DropTruncated {
		truncKeys = nil // answered, but not in the output: ask again
	}
	if _, err := repairJSONL(st.TruncatedOut, truncKeys); err != nil {
		return nil, err
	}
	if _, err := repairJSONL(st.Errors, nil); err != nil {
		return nil, err
	}
	var jobs []distillJob
	for _, p := range prompts {
		for k := 0; k < o.N; k++ {
			if done[distillKey(p.id, k)] {
				st.Done++
			} else {
				jobs = append(jobs, distillJob{p: p, sample: k})
			}
		}
	}
	logf("%d prompts x %d = %d answers; %d already in %s, %d to ask %s for",
		len(prompts), o.N, st.Responses, st.Done, o.Out, len(jobs), o.Teacher)
	if len(jobs) == 0 {
		return st, nil
	}

	t := &teacher{o: &o, api: api, model: o.Model}
	if t.model == "" || o.Concurrency == 0 {
		models, err := t.models(ctx)
		switch {
		case err != nil && t.model == "":
			return nil, err
		case err != nil:
			o.Concurrency = 8
			logf("%v; %d requests in flight", err, o.Concurrency)
		default:
			if t.model == "" {
				t.model = models[0].ID
				logf("teacher model %q (from %s)", t.model, api.URL("/models"))
			}
			if o.Concurrency == 0 {
				o.Concurrency = openai.FillConcurrency(models, 8)
				logf("%d requests in flight", o.Concurrency)
			}
		}
	}
	if api.HTTP = o.Client; api.HTTP == nil {
		api.HTTP = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConnsPerHost: o.Concurrency,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	w, err := newDistillWriter(&o, st)
	if err != nil {
		return nil, err
	}
	runErr := t.run(ctx, jobs, w, logf)
	if err := w.close(); err != nil && runErr == nil {
		runErr = err
	}
	return st, runErr
}

// errTooManyFailures stops a run whose every request fails.
var errTooManyFailures = errors.New("too many failures in a row")

// run sends the jobs with o.Concurrency workers and writes the results as
// they arrive.
func (t *teacher) run(ctx context.Context, jobs []distillJob, w *distillWriter, logf func(string, ...any)) error {
	o := t.o
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	feed := make(chan distillJob)
	results := make(chan distillResult)
	go func() {
		defer close(feed)
		for _, j := range jobs {
			select {
			case feed <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for i := 0; i < min(o.Concurrency, len(jobs)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range feed {
				results <- t.answer(ctx, j)
			}
		}()
	}
	go func() { wg.Wait(); close(results) }()

	st := w.st
	start := time.Now()
	progress := time.NewTicker(o.ProgressEvery)
	defer progress.Stop()
	syncTick := time.NewTicker(2 * time.Second)
	defer syncTick.Stop()
	report := func() {
		el := time.Since(start)
		n := st.Written + st.Dropped + st.Failed
		line := fmt.Sprintf("%d/%d done (%.1f%%), %d this run, %d failed, %d truncated, %.0f tok/s",
			st.Done+st.Written+st.Dropped, st.Responses, 100*float64(st.Done+st.Written+st.Dropped)/float64(max(st.Responses, 1)),
			n, st.Failed, st.Truncated, float64(st.CompletionTokens)/max(el.Seconds(), 1e-9))
		if n > 0 {
			left := len(jobs) - n
			line += fmt.Sprintf(", eta %s", (time.Duration(float64(el) / float64(n) * float64(left))).Round(time.Second))
		}
		logf("%s", line)
	}
	var firstErr error
	consecutive := 0
	for {
		select {
		case r, ok := <-results:
			if !ok {
				st.Elapsed = time.Since(start)
				report()
				if cause := context.Cause(ctx); cause != nil && firstErr == nil {
					firstErr = cause
				}
				return firstErr
			}
			if r.canceled {
				continue // interrupted, not failed: a rerun asks again
			}
			if err := w.write(r); err != nil && firstErr == nil {
				firstErr = err
				cancel(err)
			}
			if r.err != nil {
				consecutive++
				if o.MaxConsecutiveErrors > 0 && consecutive >= o.MaxConsecutiveErrors && firstErr == nil {
					firstErr = fmt.Errorf("data: distill: %w: the last %d answers all failed (last: %s); see %s", errTooManyFailures, consecutive, r.err.msg, st.Errors)
					cancel(firstErr)
				}
			} else {
				consecutive = 0
			}
		case <-syncTick.C:
			if err := w.sync(); err != nil && firstErr == nil {
				firstErr = err
				cancel(err)
			}
		case <-progress.C:
			report()
		}
	}
}

// teacher asks the OpenAI-compatible endpoint.
type teacher struct {
	o     *DistillOptions
	api   *openai.Client
	model string
}

// teacherError is a request that failed for good: the HTTP status (0: no
// answer; 200: an answer that is not a chat completion) and the message.
type teacherError struct {
	status int
	msg    string
}

func (e *teacherError) Error() string {
	if e.status == 0 {
		return e.msg
	}
	return fmt.Sprintf("HTTP %d: %s", e.status, e.msg)
}

// asTeacherError reads what the client reported.
func asTeacherError(err error) *teacherError {
	var se *openai.StatusError
	switch {
	case errors.As(err, &se):
		return &teacherError{status: se.Status, msg: se.Message}
	case errors.Is(err, openai.ErrBadResponse):
		return &teacherError{status: http.StatusOK, msg: "not a chat completion: " + err.Error()}
	}
	return &teacherError{msg: err.Error()}
}

// models asks /v1/models for the served models: the model's name when
// --model is not given, the concurrency that fills the teacher when
// --concurrency is not.
func (t *teacher) models(ctx context.Context) ([]openai.Model, error) {
	models, err := t.api.Models(ctx)
	if err != nil {
		return nil, fmt.Errorf("data: distill: cannot list the teacher's models (%s): %v; pass --model and --concurrency", t.api.URL("/models"), err)
	}
	if len(models) == 0 || models[0].ID == "" {
		return nil, fmt.Errorf("data: distill: %s lists no model; pass --model", t.api.URL("/models"))
	}
	return models, nil
}

// distillResult is the outcome of one job.
type distillResult struct {
	job       distillJob
	record    *distillRecord
	tokens    int64
	err       *teacherError
	attempts  int
	canceled  bool
	truncated bool
}

// distillRecord is one line of the output.
type distillRecord struct {
	ID           string            `json:"id"`
	Sample       *int              `json:"sample,omitempty"`
	Messages     []json.RawMessage `json:"messages"`
	FinishReason string            `json:"finish_reason"`
	Truncated    bool              `json:"truncated,omitempty"`
	Usage        json.RawMessage   `json:"usage,omitempty"`
	Model        string            `json:"model,omitempty"`
}

// assistantMessage is the teacher's answer as a chat message; the chat
// templates (Qwen3, MiniCPM5) render reasoning_content inside <think>.
type assistantMessage struct {
	Role             string  `json:"role"`
	Content          string  `json:"content"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

// answer asks for one job's answer.
func (t *teacher) answer(ctx context.Context, j distillJob) distillResult {
	o := t.o
	res := distillResult{job: j}
	temp := o.Temperature
	req := &openai.ChatRequest{Model: t.model, Messages: j.p.messages, MaxTokens: o.MaxTokens, Temperature: &temp,
		ChatTemplateKwargs: map[string]any{"enable_thinking": o.EnableThinking}, Extra: o.ExtraBody}
	if o.TopP > 0 {
		req.TopP = &o.TopP
	}
	resp, attempts, err := t.api.Chat(ctx, req)
	res.attempts = attempts
	if ctx.Err() != nil {
		res.canceled = true
		return res
	}
	if err != nil {
		res.err = asTeacherError(err)
		return res
	}
	c := resp.Choices[0]
	m := c.Message
	reasoning, content := splitReasoning(&m.Content, &m.ReasoningContent, &m.Reasoning)
	msg := assistantMessage{Role: "assistant", Content: content}
	if reasoning != "" {
		msg.ReasoningContent = &reasoning
	}
	mb, err := marshalNoEscape(msg)
	if err != nil {
		res.err = &teacherError{msg: err.Error()}
		return res
	}
	rec := &distillRecord{ID: j.p.id, FinishReason: c.FinishReason, Model: t.model}
	if resp.Usage != nil {
		rec.Usage = resp.Usage.Raw
		res.tokens = int64(resp.Usage.CompletionTokens)
	}
	if o.N > 1 {
		k := j.sample
		rec.Sample = &k
	}
	rec.Messages = append(append(make([]json.RawMessage, 0, len(j.p.messages)+1), j.p.messages...), mb)
	res.truncated = c.FinishReason == "length"
	rec.Truncated = res.truncated
	res.record = rec
	return res
}

// splitReasoning returns the reasoning and the final answer of a message.
// Servers with a reasoning parser send the reasoning apart
// (reasoning_content, or reasoning in newer vLLM); others leave
// "<think>…</think>" in the content. Without "</think>" the whole content
// is the answer, unless it opens with "<think>" (an answer cut off while
// still reasoning). Surrounding newlines are trimmed as the chat template
// trims them when it renders the turn.
func splitReasoning(content, reasoningContent, reasoning *string) (string, string) {
	deref := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	c := deref(content)
	r := deref(reasoningContent)
	if r == "" {
		r = deref(reasoning)
	}
	if r == "" {
		const open, closeTag = "<think>", "</think>"
		trimmed := strings.TrimLeft(c, " \t\r\n")
		if i := strings.Index(c, closeTag); i >= 0 {
			r = strings.TrimPrefix(strings.TrimLeft(c[:i], " \t\r\n"), open)
			c = c[i+len(closeTag):]
		} else if strings.HasPrefix(trimmed, open) {
			r, c = strings.TrimPrefix(trimmed, open), ""
		}
	}
	return strings.Trim(r, "\n"), strings.TrimLeft(c, "\n")
}

// marshalNoEscape is json.Marshal without HTML escaping, so that "<think>"
// stays readable in the output.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// distillWriter appends records to the output and the side files, syncing
// every o.SyncEvery records and on demand.
type distillWriter struct {
	o     *DistillOptions
	st    *DistillStats
	files map[string]*appendFile
}

// appendFile is a lazily opened, buffered append-only file.
type appendFile struct {
	path    string
	f       *os.File
	w       *bufio.Writer
	pending int
}

func newDistillWriter(o *DistillOptions, st *DistillStats) (*distillWriter, error) {
	w := &distillWriter{o: o, st: st, files: map[string]*appendFile{}}
	// The output is created at once so that a run that writes nothing
	// still leaves the file the next stage expects.
	if _, err := w.file(st.Out); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *distillWriter) file(path string) (*appendFile, error) {
	if f := w.files[path]; f != nil {
		return f, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data: distill: %w", err)
	}
	af := &appendFile{path: path, f: f, w: bufio.NewWriterSize(f, 1<<20)}
	w.files[path] = af
	return af, nil
}

// write appends one result where it belongs and counts it.
func (w *distillWriter) write(r distillResult) error {
	st := w.st
	var path string
	var line []byte
	var err error
	switch {
	case r.err != nil:
		path = st.Errors
		rec := struct {
			ID       string `json:"id"`
			Sample   *int   `json:"sample,omitempty"`
			Status   int    `json:"status,omitempty"`
			Error    string `json:"error"`
			Attempts int    `json:"attempts"`
			Time     string `json:"time"`
		}{ID: r.job.p.id, Status: r.err.status, Error: r.err.msg, Attempts: r.attempts, Time: time.Now().UTC().Format(time.RFC3339)}
		if w.o.N > 1 {
			k := r.job.sample
			rec.Sample = &k
		}
		line, err = marshalNoEscape(rec)
		st.Failed++
	case r.truncated && w.o.DropTruncated:
		path = st.TruncatedOut
		line, err = marshalNoEscape(r.record)
		st.Dropped++
		st.Truncated++
		st.CompletionTokens += r.tokens
	default:
		path = st.Out
		line, err = marshalNoEscape(r.record)
		st.Written++
		if r.truncated {
			st.Truncated++
		}
		st.CompletionTokens += r.tokens
	}
	if err != nil {
		return fmt.Errorf("data: distill: %w", err)
	}
	f, err := w.file(path)
	if err != nil {
		return err
	}
	// One record, one line, written whole into the buffer: a crash can
	// only leave a partial last line, which the next run cuts off.
	line = append(line, '\n')
	if _, err := f.w.Write(line); err != nil {
		return fmt.Errorf("data: distill: %s: %w", path, err)
	}
	f.pending++
	if f.pending >= w.o.SyncEvery {
		return f.sync()
	}
	return nil
}

func (f *appendFile) sync() error {
	if f.pending == 0 {
		return nil
	}
	if err := f.w.Flush(); err != nil {
		return fmt.Errorf("data: distill: %s: %w", f.path, err)
	}
	if err := f.f.Sync(); err != nil {
		return fmt.Errorf("data: distill: %s: %w", f.path, err)
	}
	f.pending = 0
	return nil
}

func (w *distillWriter) sync() error {
	for _, f := range w.files {
		if err := f.sync(); err != nil {
			return err
		}
	}
	return nil
}

func (w *distillWriter) close() error {
	err := w.sync()
	for _, f := range w.files {
		if cerr := f.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("data: distill: %s: %w", f.path, cerr)
		}
	}
	return err
}

// repairJSONL makes path end with a whole line: a last line without its
// newline (a crash mid-write) is cut off, unless it is a complete record,
// which then gets its newline. Every whole line goes to each (when not
// nil); a whole line it rejects is an error, since it means the file is
// not what this run would write and nothing in it may be lost. A missing
// file is empty. It returns the number of bytes cut.
func repairJSONL(path string, each func([]byte) error) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("data: distill: %w", err)
	}
	defer f.Close()
	rd := bufio.NewReaderSize(f, 1<<20)
	var off int64
	for n := 1; ; n++ {
		line, err := rd.ReadBytes('\n')
		if err == io.EOF {
			if len(line) == 0 {
				return 0, nil
			}
			// The unterminated tail.
			if json.Valid(line) && (each == nil || each(line) == nil) {
				if _, err := f.WriteAt([]byte{'\n'}, off+int64(len(line))); err != nil {
					return 0, fmt.Errorf("data: distill: %s: %w", path, err)
				}
				return 0, f.Sync()
			}
			if err := f.Truncate(off); err != nil {
				return 0, fmt.Errorf("data: distill: %s: cutting the partial last line: %w", path, err)
			}
			return int64(len(line)), f.Sync()
		}
		if err != nil {
			return 0, fmt.Errorf("data: distill: %s: %w", path, err)
		}
		off += int64(len(line))
		b := bytes.TrimSpace(line)
		if len(b) == 0 || each == nil {
			continue
		}
		if err := each(b); err != nil {
			return 0, fmt.Errorf("data: distill: %s line %d: %v; move the file away or fix the line", path, n, err)
		}
	}
}

// loadDistillPrompts reads the prompts files (a file or a glob, in sorted
// order), normalizes every prompt to a message list ending with its last
// user turn, and drops repeats. With several files, an explicit id is
// prefixed with its file's name, so that files numbering their prompts
// alike do not collide.
func loadDistillPrompts(ctx context.Context, pattern, field string, limit int, logf func(string, ...any)) ([]*distillPrompt, error) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fmt.Errorf("data: distill: prompts %q: %w", pattern, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("data: distill: prompts %q: no such file", pattern)
	}
	var prompts []*distillPrompt
	byID := map[string]string{} // id -> where it was first seen
	skipped, repeats := 0, 0
	errStop := errStopReading
	for _, path := range files {
		if err := CheckNotEvalSet("data: distill: prompts", path); err != nil {
			return nil, err
		}
		format, err := formatOf(path, FormatAuto)
		if err != nil {
			return nil, fmt.Errorf("data: distill: prompts: %w", err)
		}
		prefix := ""
		if len(files) > 1 {
			prefix = filepath.Base(path) + ":"
		}
		add := func(id string, line int, raw json.RawMessage, text *string) error {
			var msgs []json.RawMessage
			var err error
			if text != nil {
				m, _ := marshalNoEscape(struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				}{"user", *text})
				msgs = []json.RawMessage{m}
			} else if msgs, err = promptMessages(raw); err != nil {
				if errors.Is(err, errNoUserTurn) {
					skipped++
					return nil
				}
				return fmt.Errorf("prompt %d: %w", line, err)
			}
			derived := id == ""
			if derived {
				// Content-addressed: stable when the file is reordered or
				// regenerated, so resuming still matches.
				h := sha256.New()
				for _, m := range msgs {
					h.Write(m)
					h.Write([]byte{0})
				}
				id = "sha256-" + hex.EncodeToString(h.Sum(nil))[:16]
			} else {
				id = prefix + id
			}
			where := fmt.Sprintf("line %d", line)
			if prefix != "" {
				where = filepath.Base(path) + " " + where
			}
			if prev, ok := byID[id]; ok {
				if !derived {
					return fmt.Errorf("line %d: id %q repeats the id of %s", line, id, prev)
				}
				repeats++
				return nil
			}
			byID[id] = where
			prompts = append(prompts, &distillPrompt{id: id, messages: msgs})
			if limit > 0 && len(prompts) >= limit {
				return errStop
			}
			return nil
		}
		switch format {
		case FormatJSONL:
			err = readPromptsJSONL(ctx, path, field, add)
		default:
			f := field
			if f == "" {
				f = "messages"
			}
			line := 0
			src := SourceConfig{Name: "prompts", Kind: KindChat, Field: f, MaxLineBytes: DefaultMaxLineBytes}
			err = readFile(ctx, FileInfo{Path: path, Format: format}, src, func(r rawRecord) error {
				line++
				if r.null {
					skipped++
					return nil
				}
				if v := strings.TrimSpace(r.value); strings.HasPrefix(v, "[") {
					return add("", line, json.RawMessage(v), nil)
				}
				return add("", line, nil, &r.value)
			})
		}
		if errors.Is(err, errStop) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("data: distill: prompts %s: %w", path, err)
		}
	}
	if skipped > 0 || repeats > 0 {
		logf("prompts: skipped %d without a user message, %d repeated", skipped, repeats)
	}
	if len(prompts) == 0 {
		return nil, fmt.Errorf("data: distill: prompts %s: no prompt found", pattern)
	}
	return prompts, nil
}

// readPromptsJSONL reads JSONL prompts: {"id", "messages"|"conversations"|
// "prompt"} or the given field. A numeric id is used as written.
func readPromptsJSONL(ctx context.Context, path, field string, add func(string, int, json.RawMessage, *string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var in io.Reader = bufio.NewReaderSize(f, 1<<20)
	if strings.HasSuffix(strings.ToLower(path), ".gz") {
		gz, err := gzip.NewReader(in)
		if err != nil {
			return err
		}
		defer gz.Close()
		in = gz
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<16), DefaultMaxLineBytes)
	fields := []string{"messages", "conversations", "prompt"}
	if field != "" {
		fields = []string{field}
	}
	for line := 1; sc.Scan(); line++ {
		if line%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("line %d: not a JSON object: %w", line, err)
		}
		id := ""
		if raw, ok := obj["id"]; ok && string(raw) != "null" {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				id = s
			} else if raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9' {
				id = string(raw)
			} else {
				return fmt.Errorf("line %d: id is not a string or a number", line)
			}
		}
		var v json.RawMessage
		for _, k := range fields {
			if raw, ok := obj[k]; ok && string(raw) != "null" {
				v = raw
				break
			}
		}
		if v == nil {
			return fmt.Errorf("line %d: no %s field", line, strings.Join(fields, ", "))
		}
		var err error
		if v[0] == '"' {
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("line %d: %w", line, err)
			}
			// A string is the prompt itself, unless it holds a JSON list.
			if t := strings.TrimSpace(s); strings.HasPrefix(t, "[") && json.Valid([]byte(t)) {
				err = add(id, line, json.RawMessage(t), nil)
			} else {
				err = add(id, line, nil, &s)
			}
		} else {
			err = add(id, line, v, nil)
		}
		if err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("a line is longer than %d bytes", DefaultMaxLineBytes)
		}
		return err
	}
	return nil
}

// errNoUserTurn marks a conversation without a user message: nothing to
// answer.
var errNoUserTurn = errors.New("no user message")

// shareGPTRoles maps ShareGPT's "from" to chat roles.
var shareGPTRoles = map[string]string{
	"system": "system", "human": "user", "user": "user",
	"gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "model": "assistant", "bing": "assistant",
	"tool": "tool", "function": "tool", "observation": "tool",
}

// promptMessages turns a message list ({role, content} or ShareGPT's
// {from, value}) into the prompt: the messages up to and including the last
// user turn. An answer that follows it (an SFT dataset's own) is dropped,
// so that the teacher answers instead.
func promptMessages(raw json.RawMessage) ([]json.RawMessage, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("messages: want a list of {role, content}: %w", err)
	}
	out := make([]json.RawMessage, 0, len(list))
	last := -1
	for i, m := range list {
		var head struct {
			Role  string          `json:"role"`
			From  string          `json:"from"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(m, &head); err != nil {
			return nil, fmt.Errorf("messages[%d]: want an object: %w", i, err)
		}
		role := head.Role
		if role == "" && head.From != "" {
			r, ok := shareGPTRoles[strings.ToLower(head.From)]
			if !ok {
				return nil, fmt.Errorf("messages[%d]: unknown speaker %q", i, head.From)
			}
			role = r
			c := head.Value
			if len(c) == 0 {
				c = json.RawMessage(`""`)
			}
			m, _ = marshalNoEscape(struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			}{role, c})
		}
		if role == "" {
			return nil, fmt.Errorf("messages[%d]: no role", i)
		}
		if role == "user" {
			last = i
		}
		out = append(out, m)
	}
	if last < 0 {
		return nil, errNoUserTurn
	}
	return out[:last+1], nil
}
