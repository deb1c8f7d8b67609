package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"dllm/model"
	"dllm/torch"
)

// benchDecodeLines runs `dllm bench decode args... --json` and decodes one
// JSON object per line into T.
func benchDecodeLines[T any](t *testing.T, args ...string) []T {
	t.Helper()
	out, err := runCmd(t, []*cli.Command{benchCommand()}, append([]string{"bench", "decode", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rows []T
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r T
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		rows = append(rows, r)
	}
	return rows
}

// The in-process benchmark on the tiny model: every point is there, fixed
// commits spend exactly ceil(B/k) denoising forwards plus one commit forward
// per block, AR spends one forward per token, and the floor follows from the
// shape.
func TestBenchDecodeCommand(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Fatal(err)
	}
	torch.SetNumThreads(1) // a tiny model on a CPU shared with other tests
	const block, tokens, bw = 8, 32, 100.0
	// testdata/tiny-llama: 195008 parameters less the 512x64 embedding, in
	// f32; K and V of 3 layers x 2 heads x 16 dims per token.
	const weightBytes, kvPerToken = (195008 - 512*64) * 4, 2 * 3 * 2 * 16 * 4
	for _, src := range [][]string{{"--config", tinyModel}, {"--model", tinyModel}, {"--model", convertedTiny(t)}} {
		points := benchDecodeLines[decodePoint](t, append(src, "--device", "cpu", "--dtype", "f32", "--ctx", "64,128",
			"--commit", "1,4", "--ar", "--block", fmt.Sprint(block), "--tokens", fmt.Sprint(tokens), "--warmup", "8",
			"--bandwidth-gbs", fmt.Sprint(bw))...)
		want := []struct {
			mode          string
			block, commit int
			ctx           int
			forwards      int
		}{
			// ceil(8/k) forwards a block: the first also commits the block before.
			{"commit1", block, 1, 64, 4 * 8}, {"commit4", block, 4, 64, 4 * 2}, {"ar", 1, 1, 64, tokens},
			{"commit1", block, 1, 128, 4 * 8}, {"commit4", block, 4, 128, 4 * 2}, {"ar", 1, 1, 128, tokens},
		}
		if len(points) != len(want) {
			t.Fatalf("%v: %d points, want %d: %+v", src, len(points), len(want), points)
		}
		for i, w := range want {
			p := points[i]
			name := fmt.Sprintf("%v %s at %d", src, w.mode, w.ctx)
			if p.Mode != w.mode || p.Block != w.block || p.Commit != w.commit || p.Context != w.ctx ||
				p.Device != "cpu" || p.DType != "f32" || p.Tokens != tokens || p.Forwards != w.forwards {
				t.Errorf("%s: got %+v", name, p)
			}
			if tpf := float64(tokens) / float64(w.forwards); math.Abs(p.TPF-tpf) > 1e-9 {
				t.Errorf("%s: TPF %v, want %v", name, p.TPF, tpf)
			}
			// The forwards' host time lies within the timed blocks' wall time.
			wallMS := float64(p.Tokens) / p.TokPerSec * 1000
			if !(p.StepMedianMS > 0 && p.StepP90MS >= p.StepMedianMS && p.TokPerSec > 0 && p.PrefillMS > 0 &&
				p.HostMS > 0 && p.HostMS*float64(p.Forwards) <= wallMS*1.001) {
				t.Errorf("%s: timings %+v", name, p)
			}
			floor := float64(weightBytes+w.ctx*kvPerToken) / (bw * 1e9) * 1e3
			if math.Abs(p.FloorMS-floor) > 1e-12 || math.Abs(p.VsFloor-p.StepMedianMS/floor) > 1e-6*p.VsFloor || p.BandwidthGBs != bw {
				t.Errorf("%s: floor %v ms (x%v), want %v ms", name, p.FloorMS, p.VsFloor, floor)
			}
		}
	}
	// The table: a header naming the shape, then one row per point.
	out, err := runCmd(t, []*cli.Command{benchCommand()}, "bench", "decode", "--config", tinyModel, "--device", "cpu",
		"--dtype", "f32", "--ctx", "64", "--ar", "--tokens", "4")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); err != nil || len(lines) != 3 ||
		!strings.Contains(lines[0], "3 layers") || !strings.HasPrefix(lines[2], "ar ") {
		t.Errorf("text output: %v\n%s", err, out)
	}
}

// --batch runs every point as that many sequences decoding together: each
// stream commits the tokens and spends the forwards it does alone, the
// floor reads one KV cache per stream, and the steps hold several.
func TestBenchDecodeBatch(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Fatal(err)
	}
	torch.SetNumThreads(1)
	const block, tokens = 8, 16
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	points := benchDecodeLines[decodePoint](t, "--config", tinyModel, "--device", "cpu", "--dtype", "f32", "--ctx", "32",
		"--commit", "4", "--ar", "--block", fmt.Sprint(block), "--tokens", fmt.Sprint(tokens), "--warmup", "8", "--batch", "1,3",
		"--cpuprofile", prof)
	// --cpuprofile wrote a profile (gzipped protobuf).
	if b, err := os.ReadFile(prof); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("--cpuprofile: %d bytes, %v", len(b), err)
	}
	want := []struct {
		mode            string
		batch, forwards int // per stream
	}{{"commit4", 1, 2 * 2}, {"commit4", 3, 2 * 2}, {"ar", 1, tokens}, {"ar", 3, tokens}}
	if len(points) != len(want) {
		t.Fatalf("%d points, want %d: %+v", len(points), len(want), points)
	}
	const weightBytes, kvPerToken = (195008 - 512*64) * 4, 2 * 3 * 2 * 16 * 4
	for i, w := range want {
		p := points[i]
		if p.Mode != w.mode || p.Batch != w.batch || p.Engine != "batch" || p.Tokens != w.batch*tokens || p.Forwards != w.batch*w.forwards {
			t.Errorf("point %d: got %+v, want %s x%d, %d forwards a stream", i, p, w.mode, w.batch, w.forwards)
		}
		if !(p.TokPerSec > 0) || math.Abs(p.StreamTokPerSec*float64(w.batch)-p.TokPerSec) > 1e-6*p.TokPerSec {
			t.Errorf("point %d: %v tokens/s, %v a stream", i, p.TokPerSec, p.StreamTokPerSec)
		}
		if floor := float64(weightBytes+w.batch*32*kvPerToken) / (4300 * 1e9) * 1e3; math.Abs(p.FloorMS-floor) > 1e-12 {
			t.Errorf("point %d: floor %v ms, want %v", i, p.FloorMS, floor)
		}
		if fill := p.BatchFill; w.batch > 1 && !(fill > 1 && fill <= float64(w.batch)) || w.batch == 1 && fill != 0 || p.GatherWaits < 0 {
			t.Errorf("point %d: %v sequences a step, %d gather waits", i, fill, p.GatherWaits)
		}
	}
}

func TestBenchDecodeBadArguments(t *testing.T) {
	base := []string{"bench", "decode", "--device", "cpu", "--dtype", "f32"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no weights", nil, "--model DIR or --config FILE"},
		{"both", []string{"--model", tinyModel, "--config", tinyModel}, "not both"},
		{"commit above block", []string{"--config", tinyModel, "--block", "4", "--commit", "8"}, "more than the block"},
		{"bad commit", []string{"--config", tinyModel, "--commit", "1,x"}, "--commit"},
		{"bad context", []string{"--config", tinyModel, "--ctx", "0"}, "--ctx"},
		{"bad batch", []string{"--config", tinyModel, "--batch", "4,0"}, "--batch"},
		{"context past the model", []string{"--config", tinyModel, "--ctx", "4k"}, "max_position_embeddings"},
		{"no tokens", []string{"--config", tinyModel, "--tokens", "0"}, "--tokens"},
		{"bandwidth", []string{"--config", tinyModel, "--bandwidth-gbs", "0"}, "--bandwidth-gbs"},
		{"server URL", []string{"--server", "localhost:8000"}, "http://"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runCmd(t, []*cli.Command{benchCommand()}, append(base, c.args...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q\n%s", err, c.want, out)
			}
		})
	}
}

func TestParseSizes(t *testing.T) {
	cases := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"1k,8k,16k,32k", []int{1024, 8192, 16384, 32768}, true},
		{"64, 128", []int{64, 128}, true},
		{"2K", []int{2048}, true},
		{"0", nil, false},
		{"k", nil, false},
		{"1.5k", nil, false},
		{"", nil, false},
	}
	for _, c := range cases {
		got, err := parseSizes(c.in)
		if (err == nil) != c.ok || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

// fakeChatServer streams a chat completion as an OpenAI-compatible server
// does: a role chunk, then chunks of text after a delay (the time to the
// first token), an optional usage chunk and [DONE]. seen receives each
// request body.
func fakeChatServer(t *testing.T, firstAfter time.Duration, texts []string, usage bool, seen chan<- map[string]any) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if seen != nil {
			seen <- body
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(s string) {
			fmt.Fprintf(w, "data: %s\n\n", s)
			w.(http.Flusher).Flush()
		}
		send(`{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}`)
		time.Sleep(firstAfter)
		for _, s := range texts {
			b, _ := json.Marshal(s)
			send(fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}`, b))
		}
		send(`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`)
		if usage {
			send(`{"choices":[],"usage":{"prompt_tokens":70,"completion_tokens":96,"total_tokens":166}}`)
		}
		send("[DONE]")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestBenchDecodeServer(t *testing.T) {
	const delay = 30 * time.Millisecond
	texts := []string{"a b c", "d e f", "g h i"}
	cases := []struct {
		name    string
		usage   bool
		args    []string
		tokens  int
		counted string
		check   func(t *testing.T, body map[string]any)
	}{
		{"usage", true, []string{"--threshold", "0.5"}, 96, "usage", func(t *testing.T, b map[string]any) {
			if b["threshold"] != 0.5 || b["model"] != "fake-model" || b["stream"] != true || b["ignore_eos"] != true {
				t.Errorf("request %v", b)
			}
		}},
		{"no usage: chunks", false, []string{"--model", "named", "--ignore-eos=false"}, 3, "chunks", func(t *testing.T, b map[string]any) {
			if _, ok := b["threshold"]; ok || b["model"] != "named" || b["ignore_eos"] != nil {
				t.Errorf("request %v", b)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seen := make(chan map[string]any, 10)
			srv := fakeChatServer(t, delay, texts, c.usage, seen)
			rows := benchDecodeLines[serverRequest](t, append([]string{"--server", srv.URL + "/v1/", "--max-tokens", "96",
				"--prompt-tokens", "50", "--requests", "2"}, c.args...)...)
			if len(rows) != 3 || rows[2].Kind != "summary" {
				t.Fatalf("rows %+v", rows)
			}
			for _, r := range rows {
				if r.Kind == "request" && (r.CompletionTokens != c.tokens || r.Counted != c.counted || r.Chunks != len(texts) ||
					r.TTFTMS < float64(delay.Milliseconds()) || r.TotalMS < r.TTFTMS || r.Finish != "length" ||
					math.Abs(r.TokPerSec-float64(c.tokens)/(r.TotalMS/1000)) > 1e-3*r.TokPerSec) {
					t.Errorf("row %+v", r)
				}
			}
			if len(seen) != 3 { // the warm-up and two timed requests
				t.Fatalf("%d requests", len(seen))
			}
			<-seen // warm-up
			body := <-seen
			if body["max_tokens"] != 96.0 || body["temperature"] != 0.0 {
				t.Errorf("request %v", body)
			}
			if words := len(strings.Fields(body["messages"].([]any)[0].(map[string]any)["content"].(string))); words < 45 || words > 50 {
				t.Errorf("prompt of %d words for 50 tokens", words)
			}
			c.check(t, body)
		})
	}
}

// --clients N runs N streaming clients at once, --requests each, and
// reports a row per N counting every request's tokens.
func TestBenchDecodeServerClients(t *testing.T) {
	fake := fakeChatServer(t, 20*time.Millisecond, []string{"a b", "c"}, true, nil)
	var inflight, most atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		fake.Config.Handler.ServeHTTP(w, r)
	}))
	defer srv.Close()
	rows := benchDecodeLines[serverLoad](t, "--server", srv.URL, "--max-tokens", "96", "--requests", "3", "--clients", "1,4")
	if len(rows) != 2 {
		t.Fatalf("%d rows: %+v", len(rows), rows)
	}
	for i, n := range []int{1, 4} {
		r := rows[i]
		if r.Kind != "clients" || r.Clients != n || r.Requests != 3*n || r.Tokens != 96*3*n || r.Model != "fake-model" ||
			!(r.WallS > 0) || math.Abs(r.TokPerSec-float64(r.Tokens)/r.WallS) > 1e-6*r.TokPerSec || !(r.StreamTokPerSec > 0) || r.TTFTMS < 20 {
			t.Errorf("row %d: %+v", i, r)
		}
	}
	// (A handler may still be returning when its client sends the next.)
	if m := most.Load(); m < 4 {
		t.Errorf("at most %d requests in flight, want the 4 clients'", m)
	}
}

func TestBenchDecodeServerErrors(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"status", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"message":"no such model"}}`, http.StatusNotFound)
		}, "no such model"},
		{"no [DONE]", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
		}, "[DONE]"},
		{"error event", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "data: {\"error\":{\"message\":\"out of memory\"}}\n\ndata: [DONE]\n\n")
		}, "out of memory"},
		{"not JSON", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "data: {oops\n\ndata: [DONE]\n\n")
		}, "not JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			_, err := runCmd(t, []*cli.Command{benchCommand()}, "bench", "decode", "--server", srv.URL, "--model", "m")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// The floor's weight bytes leave out the embedding table unless the head
// shares it: MiniCPM5-2B reads 4.50 GB per forward in bf16.
func TestBenchWeightBytes(t *testing.T) {
	cases := []struct {
		config string
		dt     torch.DType
		tied   bool
		want   int64
	}{
		{"../../testdata/minicpm5-2b-shape/config.json", torch.BFloat16, false, 4_498_739_200},
		{tinyModel, torch.Float32, false, (195008 - 512*64) * 4},
		{tinyModel, torch.Float32, true, (195008 - 512*64) * 4}, // the head is the table: read whole once
	}
	for _, c := range cases {
		cfg, err := model.LoadConfig(c.config)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TieWordEmbeddings = c.tied
		if got := benchWeightBytes(cfg, c.dt); got != c.want {
			t.Errorf("%s (tied %v): %d bytes, want %d", c.config, c.tied, got, c.want)
		}
	}
}
