// Package loadgen drives a dllm (or any OpenAI-compatible) server with many
// concurrent clients mixing whole and streamed generations, clients that
// hang up, and bad requests, and reports what came back: latencies,
// statuses, anything unexpected, whether the queue kept arrival order, and
// the server's resource use over time when it serves /debug/stats
// (dllm serve --debug-stats). `dllm bench load` and serve's load test run it.
//
// A run is bounded: clients stop at the end of each phase and every request
// has a deadline. Its phases are a short warm-up, then two halves of load,
// with an idle sample of the server's stats before, between and after them,
// so that growth between the middle and the end (both warm) means a leak.
package loadgen

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"dllm/openai"
	"dllm/serve/api"
)

// Config sets up a run; zero fields take the defaults noted.
type Config struct {
	// URL is the server's base URL (http://127.0.0.1:8000).
	URL string
	// Clients run concurrently, each one request at a time; default 64.
	Clients int
	// Duration is the time under load, both halves; default 3 minutes.
	Duration time.Duration
	// Warmup is a first, unmeasured load phase; default Duration/10, at
	// most 10 s.
	Warmup time.Duration
	// MaxTokens caps each generation; default 16.
	MaxTokens int
	// Model is the model name sent; default the first the server lists.
	Model string
	// Seed makes the mix of requests reproducible.
	Seed uint64
	// StatsEvery is how often /debug/stats is sampled under load; default
	// Duration/8.
	StatsEvery time.Duration
	// RequestTimeout bounds one request; default 60 s.
	RequestTimeout time.Duration
	// Progress, if set, gets a line per stats sample and phase.
	Progress io.Writer
}

// Kinds of request in the mix, with their shares.
const (
	KindChat        = "chat"         // whole chat completion
	KindStream      = "stream"       // streamed chat completion, read to the end
	KindCompletion  = "completion"   // whole text completion
	KindAbortStream = "abort_stream" // streamed, hung up after the first event
	KindAbortWhole  = "abort_whole"  // whole, hung up after 1-30 ms
	KindBad         = "bad"          // a malformed request (see badRequests)
	KindInfo        = "info"         // GET /health or /v1/models
)

var mix = []struct {
	kind   string
	weight int
}{
	{KindChat, 30}, {KindStream, 25}, {KindCompletion, 5}, {KindAbortStream, 8},
	{KindAbortWhole, 7}, {KindBad, 20}, {KindInfo, 5},
}

// Sample is the server's stats at one moment of the run.
type Sample struct {
	// Phase is "start", "middle" or "end" (idle, after a GC) or "load".
	Phase string         `json:"phase"`
	At    time.Duration  `json:"at_ns"` // since the run began
	Stats api.DebugStats `json:"stats"`
}

// Latency summarises durations, in milliseconds.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(q float64) float64 { return ms(ds[min(len(ds)-1, int(q*float64(len(ds))))]) }
	return Latency{N: len(ds), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ms(ds[len(ds)-1])}
}

// KindReport counts one kind of request's outcomes.
type KindReport struct {
	Requests int         `json:"requests"`
	Statuses map[int]int `json:"statuses"` // 0: no response (transport error or the client hung up)
	// Latency is the whole request, for those answered 200 in full.
	Latency Latency `json:"latency"`
	// FirstToken is a stream's time to its first text, for streams.
	FirstToken Latency `json:"first_token,omitempty"`
}

// Report is what a run saw.
type Report struct {
	Clients  int                    `json:"clients"`
	Duration time.Duration          `json:"duration_ns"` // under load, warm-up excluded
	Requests int                    `json:"requests"`
	Kinds    map[string]*KindReport `json:"kinds"`
	// Generation is the latency of every generation answered 200 in full
	// (chat, stream, completion), queueing included.
	Generation Latency `json:"generation"`
	// Overloaded counts 503 answers (queue full); NoRetryAfter those of
	// them without a Retry-After header.
	Overloaded   int `json:"overloaded"`
	NoRetryAfter int `json:"overloaded_without_retry_after"`
	// Unexpected counts answers that were not what the request called for
	// (a wrong status, a malformed body, a transport error where a
	// response was due); Examples holds the first few.
	Unexpected int      `json:"unexpected"`
	Examples   []string `json:"unexpected_examples,omitempty"`
	// FIFOChecked whole responses carried their queue arrival and grant
	// numbers (X-Dllm-Queue-Seq, X-Dllm-Grant-Seq); FIFOInversions counts
	// pairs served in another order than they arrived.
	FIFOChecked    int `json:"fifo_checked"`
	FIFOInversions int `json:"fifo_inversions"`
	// Samples are the server's stats over time; empty when the server has
	// no /debug/stats.
	Samples []Sample `json:"samples,omitempty"`
}

// Idle returns the idle sample of a phase ("start", "middle", "end").
func (r *Report) Idle(phase string) (api.DebugStats, bool) {
	for _, s := range r.Samples {
		if s.Phase == phase {
			return s.Stats, true
		}
	}
	return api.DebugStats{}, false
}

// runner is one run's shared state.
type runner struct {
	cfg     Config
	client  *http.Client // the load
	probe   *http.Client // stats, without keep-alive (no idle connection of its own)
	context int          // the server's context length, for a too-long prompt
	big     []byte       // a body over 4 MiB

	mu      sync.Mutex
	report  *Report
	gen     []time.Duration
	lat     map[string][]time.Duration
	ttft    []time.Duration
	fifo    [][2]uint64
	begin   time.Time
	measure bool // outcomes of this phase count (not the warm-up)
}

// Run drives the server as cfg says and reports. It returns an error only
// when the server cannot be used at all (not answering, not ready).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Clients <= 0 {
		cfg.Clients = 64
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Minute
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = min(cfg.Duration/10, 10*time.Second)
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 16
	}
	if cfg.StatsEvery <= 0 {
		cfg.StatsEvery = cfg.Duration / 8
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = time.Minute
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	r := &runner{
		cfg:    cfg,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients, DisableCompression: true}},
		probe:  &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second},
		report: &Report{Clients: cfg.Clients, Kinds: map[string]*KindReport{}},
		lat:    map[string][]time.Duration{},
		big:    bytes.Repeat([]byte("x"), 4<<20+1024),
	}
	defer r.client.CloseIdleConnections()
	if err := r.ready(ctx); err != nil {
		return nil, err
	}
	r.begin = time.Now()
	_, hasStats := r.stats(ctx, false)

	r.load(ctx, 0, cfg.Warmup, false, false)
	if hasStats {
		r.idleSample(ctx, "start")
	}
	half := cfg.Duration / 2
	start := time.Now()
	r.load(ctx, 1, half, true, hasStats)
	if hasStats {
		r.idleSample(ctx, "middle")
	}
	elapsed := time.Since(start)
	start = time.Now()
	r.load(ctx, 2, cfg.Duration-half, true, hasStats)
	elapsed += time.Since(start)
	if hasStats {
		r.idleSample(ctx, "end")
	}
	rep := r.report
	rep.Duration = elapsed
	rep.Generation = summarize(r.gen)
	for kind, ds := range r.lat {
		rep.Kinds[kind].Latency = summarize(ds)
	}
	if k := rep.Kinds[KindStream]; k != nil {
		k.FirstToken = summarize(r.ttft)
	}
	slices.SortFunc(r.fifo, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	rep.FIFOChecked = len(r.fifo)
	for i := 1; i < len(r.fifo); i++ {
		if r.fifo[i][1] < r.fifo[i-1][1] {
			rep.FIFOInversions++
		}
	}
	return rep, ctx.Err()
}

// ready waits (at most a minute) for /health to answer 200 and reads the
// context length from /v1/models.
func (r *runner) ready(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := r.get(ctx, "/health")
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			return fmt.Errorf("loadgen: %s/health not ready: %w", r.cfg.URL, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	resp, err := r.get(ctx, "/v1/models")
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if json.Unmarshal(resp.body, &models) == nil && len(models.Data) > 0 {
		r.context = models.Data[0].MaxModelLen
		if r.cfg.Model == "" {
			r.cfg.Model = models.Data[0].ID
		}
	}
	if r.context <= 0 {
		r.context = 32768
	}
	return nil
}

type response struct {
	*http.Response
	body []byte
}

func (r *runner) get(ctx context.Context, path string) (*response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.URL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.probe.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return &response{resp, b}, err
}

// stats reads /debug/stats (after a GC when gc); false when the server has
// none.
func (r *runner) stats(ctx context.Context, gc bool) (api.DebugStats, bool) {
	path := "/debug/stats"
	if gc {
		path += "?gc=1"
	}
	var st api.DebugStats
	resp, err := r.get(ctx, path)
	if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(resp.body, &st) != nil {
		return st, false
	}
	return st, true
}

// idleSample waits until the server is idle and settled (nothing running
// or waiting, the goroutine count steady) and records its stats.
func (r *runner) idleSample(ctx context.Context, phase string) {
	r.client.CloseIdleConnections() // the server's connection goroutines end
	var st, prev api.DebugStats
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; ; i++ {
		st, _ = r.stats(ctx, true)
		if i > 0 && st.Running == 0 && st.Waiting == 0 && st.Goroutines == prev.Goroutines && st.OpenFDs == prev.OpenFDs {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		prev = st
		time.Sleep(250 * time.Millisecond)
	}
	r.addSample(phase, st)
}

func (r *runner) addSample(phase string, st api.DebugStats) {
	s := Sample{Phase: phase, At: time.Since(r.begin), Stats: st}
	r.mu.Lock()
	r.report.Samples = append(r.report.Samples, s)
	r.mu.Unlock()
	if w := r.cfg.Progress; w != nil {
		fmt.Fprintf(w, "loadgen: %6.1fs %-6s goroutines %4d  heap %7.1f MiB  rss %7.1f MiB  fds %4d  tensors %5d  running %d waiting %2d  requests %d\n",
			s.At.Seconds(), phase, st.Goroutines, mib(st.HeapInuse), mib(uint64(st.RSS)), st.OpenFDs, st.LiveTensors, st.Running, st.Waiting, st.Requests)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// load runs the clients for d as phase number n; outcomes count when
// measure is set (the warm-up's do not), and with sample the server's
// stats are sampled every StatsEvery meanwhile.
func (r *runner) load(ctx context.Context, n int, d time.Duration, measure, sample bool) {
	r.mu.Lock()
	r.measure = measure
	r.mu.Unlock()
	phase, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for i := range r.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.client1(ctx, phase, rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)<<8|uint64(n))))
		}()
	}
	if sample {
		tick := time.NewTicker(r.cfg.StatsEvery)
		defer tick.Stop()
	loop:
		for {
			select {
			case <-phase.Done():
				break loop
			case <-tick.C:
				if st, ok := r.stats(ctx, false); ok {
					r.addSample("load", st)
				}
			}
		}
	}
	wg.Wait()
}

// client1 is one client: requests one after another until the phase ends.
// A request under way finishes (with its own deadline) even if the phase
// ends meanwhile, so that every outcome is a real one.
func (r *runner) client1(ctx, phase context.Context, rng *rand.Rand) {
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	for phase.Err() == nil {
		n := rng.IntN(total)
		kind := mix[0].kind
		for _, m := range mix {
			if n < m.weight {
				kind = m.kind
				break
			}
			n -= m.weight
		}
		if overloaded := r.do(ctx, kind, rng); overloaded {
			// Come back soon rather than after Retry-After (2 s): the point
			// is to keep the queue full.
			select {
			case <-phase.Done():
			case <-time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond):
			}
		}
	}
}

// outcome is one request's result, checked.
type outcome struct {
	kind      string
	status    int // 0: no response
	latency   time.Duration
	ttft      time.Duration // streams: first text
	ok        bool          // a complete 200 generation
	problem   string        // not what was due
	retryless bool          // a 503 without Retry-After
	queueSeq  uint64
	grantSeq  uint64
}

// do sends one request of kind and records its outcome; it reports a 503.
func (r *runner) do(ctx context.Context, kind string, rng *rand.Rand) bool {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	var o outcome
	switch kind {
	case KindChat, KindCompletion, KindAbortWhole:
		o = r.whole(ctx, kind, rng)
	case KindStream, KindAbortStream:
		o = r.stream(ctx, kind, rng)
	case KindBad:
		o = r.bad(ctx, rng)
	case KindInfo:
		o = r.info(ctx, rng)
	}
	o.kind = kind
	r.record(o)
	return o.status == http.StatusServiceUnavailable
}

func (r *runner) record(o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.measure {
		return
	}
	rep := r.report
	k := rep.Kinds[o.kind]
	if k == nil {
		k = &KindReport{Statuses: map[int]int{}}
		rep.Kinds[o.kind] = k
	}
	rep.Requests++
	k.Requests++
	k.Statuses[o.status]++
	if o.status == http.StatusServiceUnavailable {
		rep.Overloaded++
		if o.retryless {
			rep.NoRetryAfter++
		}
	}
	if o.problem != "" {
		rep.Unexpected++
		if len(rep.Examples) < 10 {
			rep.Examples = append(rep.Examples, o.kind+": "+o.problem)
		}
	}
	if o.ok {
		r.lat[o.kind] = append(r.lat[o.kind], o.latency)
		if o.kind != KindAbortWhole {
			r.gen = append(r.gen, o.latency)
		}
		if o.ttft > 0 {
			r.ttft = append(r.ttft, o.ttft)
		}
		if o.queueSeq > 0 && o.grantSeq > 0 {
			r.fifo = append(r.fifo, [2]uint64{o.queueSeq, o.grantSeq})
		}
	}
}

func (r *runner) post(ctx context.Context, path, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.URL+path, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return r.client.Do(req)
}

// prompts are short user messages; the tiny test model answers anything.
var prompts = []string{"Hi", "Tell me a story about a boat.", "What is 2+2?", "Write a haiku on autumn.", "数学", "Explain diffusion models in one line."}

func (r *runner) chatBody(rng *rand.Rand, stream bool) string {
	temp, seed := []float64{0, 0.7, 1}[rng.IntN(3)], int64(rng.IntN(1000))
	req := openai.ChatRequest{Model: r.cfg.Model, MaxTokens: 1 + rng.IntN(r.cfg.MaxTokens), Temperature: &temp, Seed: &seed,
		Messages: openai.Messages(openai.Message{Role: "user", Content: prompts[rng.IntN(len(prompts))]}),
		Stream:   stream, StreamOptions: &openai.StreamOptions{IncludeUsage: true}}
	b, _ := json.Marshal(req)
	return string(b)
}

// overloaded checks a 503: it must say queue_full and carry Retry-After.
func overloaded(resp *http.Response, body []byte, o *outcome) {
	o.retryless = resp.Header.Get("Retry-After") == ""
	if o.retryless {
		o.problem = "503 without Retry-After"
	}
	if !bytes.Contains(body, []byte(`"queue_full"`)) {
		o.problem = "503 that is not queue_full: " + trim(body)
	}
}

func trim(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// whole sends a chat or text completion and checks the answer; abort_whole
// hangs up after 1-30 ms.
func (r *runner) whole(ctx context.Context, kind string, rng *rand.Rand) (o outcome) {
	path, body := "/v1/chat/completions", r.chatBody(rng, false)
	if kind == KindCompletion {
		path = "/v1/completions"
		b, _ := json.Marshal(map[string]any{"model": r.cfg.Model, "prompt": prompts[rng.IntN(len(prompts))], "max_tokens": 1 + rng.IntN(r.cfg.MaxTokens), "seed": rng.IntN(1000)})
		body = string(b)
	}
	if kind == KindAbortWhole {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(1+rng.IntN(30))*time.Millisecond)
		defer cancel()
	}
	t0 := time.Now()
	resp, err := r.post(ctx, path, "application/json", strings.NewReader(body))
	if err != nil {
		if kind != KindAbortWhole || !errors.Is(err, context.DeadlineExceeded) {
			o.problem = "no response: " + err.Error()
		}
		return o
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		if kind != KindAbortWhole {
			o.problem = "reading the body: " + err.Error()
		}
		return o
	}
	switch resp.StatusCode {
	case http.StatusOK:
		// Chat and text completions share these fields.
		var c openai.ChatResponse
		// A model may stop at once (eos first): no tokens, finish "stop".
		if json.Unmarshal(b, &c) != nil || len(c.Choices) != 1 || c.Usage == nil || (c.Choices[0].FinishReason != "stop" && c.Choices[0].FinishReason != "length") ||
			c.Usage.CompletionTokens < 0 || c.Usage.CompletionTokens > r.cfg.MaxTokens ||
			(c.Usage.CompletionTokens == 0 && c.Choices[0].FinishReason != "stop") {
			o.problem = "malformed 200: " + trim(b)
			return o
		}
		o.ok, o.latency = true, time.Since(t0)
		o.queueSeq, _ = strconv.ParseUint(resp.Header.Get("X-Dllm-Queue-Seq"), 10, 64)
		o.grantSeq, _ = strconv.ParseUint(resp.Header.Get("X-Dllm-Grant-Seq"), 10, 64)
	case http.StatusServiceUnavailable:
		overloaded(resp, b, &o)
	default:
		o.problem = fmt.Sprintf("status %d: %s", resp.StatusCode, trim(b))
	}
	return o
}

// stream reads a streamed chat completion to its end, checking the event
// sequence; abort_stream hangs up after the first event.
func (r *runner) stream(ctx context.Context, kind string, rng *rand.Rand) (o outcome) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	resp, err := r.post(ctx, "/v1/chat/completions", "application/json", strings.NewReader(r.chatBody(rng, true)))
	if err != nil {
		o.problem = "no response: " + err.Error()
		return o
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusServiceUnavailable {
			overloaded(resp, b, &o)
		} else {
			o.problem = fmt.Sprintf("status %d: %s", resp.StatusCode, trim(b))
		}
		return o
	}
	var events []string
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(tmp)
		buf = append(buf, tmp[:n]...)
		for {
			i := bytes.Index(buf, []byte("\n\n"))
			if i < 0 {
				break
			}
			ev, ok := strings.CutPrefix(string(buf[:i]), "data: ")
			if !ok {
				o.problem = "not an SSE data line: " + string(buf[:i])
				return o
			}
			events = append(events, ev)
			buf = buf[i+2:]
			if o.ttft == 0 && strings.Contains(ev, `"content":"`) && !strings.Contains(ev, `"content":""`) {
				o.ttft = time.Since(t0)
			}
		}
		if kind == KindAbortStream && len(events) > 0 {
			return o // hang up: cancel and close
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			o.problem = "reading the stream: " + err.Error()
			return o
		}
	}
	if len(events) < 3 || events[len(events)-1] != "[DONE]" || !strings.Contains(events[0], `"role":"assistant"`) {
		o.problem = fmt.Sprintf("stream of %d events without role first or [DONE] last: %.300q", len(events), strings.Join(events, " | "))
		return o
	}
	finished := false
	for _, ev := range events[:len(events)-1] {
		if strings.Contains(ev, `"error"`) {
			o.problem = "error event: " + ev
			return o
		}
		if strings.Contains(ev, `"finish_reason":"stop"`) || strings.Contains(ev, `"finish_reason":"length"`) {
			finished = true
		}
	}
	if !finished {
		o.problem = "stream without finish_reason"
		return o
	}
	o.ok, o.latency = true, time.Since(t0)
	return o
}

// badRequest is a malformed request and the status it must get.
type badRequest struct {
	method, path, contentType string
	body                      func(r *runner) io.Reader
	status                    int
}

func text(s string) func(*runner) io.Reader {
	return func(*runner) io.Reader { return strings.NewReader(s) }
}

const hi = `"messages":[{"role":"user","content":"Hi"}]`

var badRequests = []badRequest{
	{"POST", "/v1/chat/completions", "application/json", text(`{"messages": [`), 400},
	{"POST", "/v1/chat/completions", "application/json", text("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"), 400},
	{"POST", "/v1/chat/completions", "text/plain", text(`{` + hi + `}`), 415},
	{"POST", "/v1/chat/completions", "application/x-www-form-urlencoded", text(`{` + hi + `}`), 415},
	{"POST", "/v1/chat/completions", "application/json", text(`{` + hi + `,"max_tokens":-5}`), 400},
	{"POST", "/v1/chat/completions", "application/json", text(`{` + hi + `,"max_tokens":1e40}`), 400},
	{"POST", "/v1/chat/completions", "application/json", text(`{` + hi + `,"n":3}`), 400},
	{"POST", "/v1/chat/completions", "application/json", text(`{` + hi + `,"temperature":7}`), 400},
	{"POST", "/v1/chat/completions", "application/json", text(`{"messages":[]}`), 400},
	{"POST", "/v1/chat/completions", "application/json", text(`{"messages":[{"role":"wizard","content":"x"}]}`), 400},
	{"POST", "/v1/chat/completions", "application/json", text(``), 400},
	{"POST", "/v1/chat/completions", "application/json", func(r *runner) io.Reader {
		// Longer than the context: every word is at least one token.
		return strings.NewReader(`{"messages":[{"role":"user","content":"` + strings.Repeat("hello ", r.context+16) + `"}]}`)
	}, 400},
	{"POST", "/v1/completions", "application/json", text(`{"prompt":[1,-2]}`), 400},
	{"POST", "/v1/embeddings", "application/json", text(`{}`), 404},
	{"GET", "/v1/chat/completions", "", nil, 405},
}

// tooLarge is the one bad request that is rare in the mix: it sends 4 MiB.
var tooLarge = badRequest{"POST", "/v1/chat/completions", "application/json", func(r *runner) io.Reader { return bytes.NewReader(r.big) }, 413}

func (r *runner) bad(ctx context.Context, rng *rand.Rand) (o outcome) {
	br := badRequests[rng.IntN(len(badRequests))]
	if rng.IntN(50) == 0 {
		br = tooLarge
	}
	var body io.Reader
	if br.body != nil {
		body = br.body(r)
	}
	req, err := http.NewRequestWithContext(ctx, br.method, r.cfg.URL+br.path, body)
	if err != nil {
		o.problem = err.Error()
		return o
	}
	if br.contentType != "" {
		req.Header.Set("Content-Type", br.contentType)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		o.problem = fmt.Sprintf("%s %s: no response: %v", br.method, br.path, err)
		return o
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	o.status = resp.StatusCode
	if resp.StatusCode != br.status || !bytes.Contains(b, []byte(`"error"`)) {
		o.problem = fmt.Sprintf("%s %s (%s): status %d, want %d: %s", br.method, br.path, br.contentType, resp.StatusCode, br.status, trim(b))
	}
	return o
}

func (r *runner) info(ctx context.Context, rng *rand.Rand) (o outcome) {
	path := []string{"/health", "/v1/models"}[rng.IntN(2)]
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.URL+path, nil)
	resp, err := r.client.Do(req)
	if err != nil {
		o.problem = path + ": no response: " + err.Error()
		return o
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	o.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		o.problem = fmt.Sprintf("%s: status %d: %s", path, resp.StatusCode, trim(b))
	}
	return o
}
