package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"dllm/diffusion"
	"dllm/tokenizer"
)

const tinyDir = "../testdata/tiny-llama"

var (
	tinyOnce sync.Once
	tinyTok  *tokenizer.Tokenizer
	tinyErr  error
)

// tinyTokenizer is the tiny test model's tokenizer (byte-level BPE with
// Qwen3's chat template; <think> and </think> are special tokens 3 and 4).
func tinyTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tinyOnce.Do(func() { tinyTok, tinyErr = tokenizer.Load(tinyDir) })
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyTok
}

// tokenizerWithTemplate is the tiny tokenizer with another chat template.
func tokenizerWithTemplate(t testing.TB, tpl string) *tokenizer.Tokenizer {
	t.Helper()
	tj, err := os.ReadFile(filepath.Join(tinyDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cj, err := os.ReadFile(filepath.Join(tinyDir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Parse(tj, cj, tpl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fakeEngine plays back the tokens of a text in blocks, standing in for
// the sampler: it honours MaxNewTokens, onBlock's stop and ctx.
type fakeEngine struct {
	tok       *tokenizer.Tokenizer
	output    string        // generated text (encoded with tok)
	ids       []int64       // or these ids, if set
	block     int           // block size; 0 = 4
	eos       bool          // end with a stop token: finish "stop" once output is spent
	gate      chan struct{} // if set, each block waits for a receive or ctx
	started   chan struct{} // if set, receives a value when Generate starts
	panicWith any           // if set, Generate panics with it
	err       error         // if set, Generate returns it

	mu      sync.Mutex
	calls   int
	last    diffusion.Options
	prompt  []int64
	ctxErr  error // ctx.Err() when Generate ended
	blocks  int   // blocks handed to onBlock in the last call
	running int   // concurrent calls (must stay <= 1)
	maxRun  int
}

func (f *fakeEngine) Generate(ctx context.Context, prompt []int64, o diffusion.Options, onBlock diffusion.BlockFunc) (res *diffusion.Result, err error) {
	f.mu.Lock()
	f.calls++
	f.last, f.prompt, f.blocks = o, append([]int64(nil), prompt...), 0
	f.running++
	f.maxRun = max(f.maxRun, f.running)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running--
		f.ctxErr = ctx.Err()
		f.mu.Unlock()
	}()
	if f.started != nil {
		f.started <- struct{}{}
	}
	if f.panicWith != nil {
		panic(f.panicWith)
	}
	if f.err != nil {
		return nil, f.err
	}
	ids := append([]int64(nil), f.ids...)
	if f.ids == nil {
		ids = toInt64(f.tok.Encode(f.output))
	}
	bs := f.block
	if bs == 0 {
		bs = 4
	}
	res = &diffusion.Result{IDs: []int64{}}
	for len(res.IDs) < o.MaxNewTokens {
		if f.gate != nil {
			select {
			case <-f.gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := len(res.IDs)
		if start >= len(ids) {
			if f.eos {
				res.FinishReason = "stop"
				break
			}
			ids = append(ids, ids...) // keep talking
		}
		end := min(start+bs, len(ids), o.MaxNewTokens)
		b := append([]int64(nil), ids[start:end]...)
		res.IDs = append(res.IDs, b...)
		res.Steps += 2
		f.mu.Lock()
		f.blocks++
		f.mu.Unlock()
		stop, err := onBlock(diffusion.Block{IDs: b, Steps: 2})
		if err != nil {
			return nil, err
		}
		if stop {
			res.FinishReason = "stop"
			break
		}
	}
	if res.FinishReason == "" {
		res.FinishReason = "length"
		if f.eos && len(res.IDs) >= len(ids) {
			res.FinishReason = "stop"
		}
	}
	res.TPF = float64(len(res.IDs)) / float64(max(res.Steps, 1))
	return res, nil
}

func (f *fakeEngine) lastOptions() diffusion.Options {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// testServer serves a fake model; cfg's zero fields get test defaults.
func testServer(t *testing.T, eng *fakeEngine, cfg Config, edit ...func(*Model)) (*Server, *httptest.Server) {
	t.Helper()
	tok := eng.tok
	if tok == nil {
		tok = tinyTokenizer(t)
		eng.tok = tok
	}
	if cfg.ModelName == "" {
		cfg.ModelName = "tiny"
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	s := New(cfg)
	m := &Model{
		Engine: eng, Tokenizer: tok, ContextLength: 4096, VocabSize: 512, BlockSize: 4,
		Defaults: diffusion.Options{BlockSize: 4, Threshold: 0.9, MaxStepsPerBlock: 4, TopP: 1, StopIDs: []int64{1}},
	}
	for _, e := range edit {
		e(m)
	}
	s.SetModel(m)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

// post sends a JSON body and returns the response with its body read.
func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// errorBody is the OpenAI error shape.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeError(t *testing.T, b []byte) errorBody {
	t.Helper()
	var e errorBody
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("not an error body: %v: %s", err, b)
	}
	if e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("error without message or type: %s", b)
	}
	return e
}

// sseEvents splits a streamed body into its data payloads.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line is not an SSE data line: %q", line)
		}
		out = append(out, data)
	}
	return out
}

// chunk is what the tests read from a streamed chat chunk.
type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role             *string `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// streamed reads a chat stream: its chunks (before [DONE]) and the
// concatenated reasoning and content.
type streamed struct {
	chunks             []chunk
	reasoning, content string
	finish             string
	usage              *usage
	done               bool
}

func parseStream(t *testing.T, body []byte) streamed {
	t.Helper()
	var s streamed
	for i, data := range sseEvents(t, body) {
		if data == "[DONE]" {
			if s.done {
				t.Fatal("two [DONE]")
			}
			s.done = true
			continue
		}
		if s.done {
			t.Fatalf("event after [DONE]: %s", data)
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, data)
		}
		s.chunks = append(s.chunks, c)
		if c.Usage != nil {
			s.usage = c.Usage
		}
		for _, ch := range c.Choices {
			if d := ch.Delta.ReasoningContent; d != nil {
				s.reasoning += *d
			}
			if d := ch.Delta.Content; d != nil {
				s.content += *d
			}
			if ch.Text != nil {
				s.content += *ch.Text
			}
			if ch.FinishReason != nil {
				if s.finish != "" {
					t.Fatal("two finish reasons")
				}
				s.finish = *ch.FinishReason
			}
		}
	}
	return s
}

// chatResult is what the tests read from a whole chat completion.
type chatResult struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role             string  `json:"role"`
			Content          string  `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
		} `json:"message"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

func decodeChat(t *testing.T, resp *http.Response, b []byte) chatResult {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var r chatResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if len(r.Choices) != 1 {
		t.Fatalf("want 1 choice: %s", b)
	}
	return r
}

func newHTTPTest(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
