package serve

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"dllm/serve/loadgen"
)

// TestLoad runs the real server on the tiny model under many concurrent
// clients (serve/loadgen: whole and streamed generations, clients hanging
// up mid-stream and while queued, malformed requests, a queue kept full) and
// checks that every answer is the right one, overload is a 503 with
// Retry-After, the queue serves in arrival order, nothing leaks (goroutines,
// open files, live tensors and the Go heap are sampled idle, after a GC,
// before, between and after two halves of load) and the server still stops
// cleanly.
//
// It runs twice: one request at a time, and four at once in a batch
// (--max-num-seqs 4). By default each is short (16 clients, 6 s).
// DLLM_LOAD_TEST=1 makes them the full test: 64 clients for 3 minutes
// (DLLM_LOAD_CLIENTS and DLLM_LOAD_DURATION change them).
// docs/reliability.md has the figures.
func TestLoad(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{{"one at a time", nil}, {"batched", []string{"--max-num-seqs", "4"}}} {
		t.Run(c.name, func(t *testing.T) { testLoad(t, c.args...) })
	}
}

func testLoad(t *testing.T, args ...string) {
	clients, duration := 16, 6*time.Second
	if os.Getenv("DLLM_LOAD_TEST") == "1" {
		clients, duration = 64, 3*time.Minute
		if v, err := strconv.Atoi(os.Getenv("DLLM_LOAD_CLIENTS")); err == nil && v > 0 {
			clients = v
		}
		if v, err := time.ParseDuration(os.Getenv("DLLM_LOAD_DURATION")); err == nil && v > 0 {
			duration = v
		}
	}
	bin := needBinary(t)
	model := tinyModelDir(t, bin)
	// A queue shorter than the clients, so that the server is overloaded.
	srv := startServer(t, bin, model, append([]string{"--max-queue", "8", "--debug-stats", "--request-timeout", "2m"}, args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), duration+5*time.Minute)
	defer cancel()
	progress := &testWriter{t: t}
	rep, err := loadgen.Run(ctx, loadgen.Config{
		URL: srv.url, Clients: clients, Duration: duration, Warmup: min(duration/10, 5*time.Second),
		MaxTokens: 16, Seed: 1, Progress: progress,
	})
	if err != nil {
		t.Fatalf("load: %v\n%s", err, srv.log())
	}
	t.Log(summary(rep))

	if rep.Unexpected > 0 {
		t.Errorf("%d unexpected answers, e.g.:\n  %s", rep.Unexpected, strings.Join(rep.Examples, "\n  "))
	}
	for _, kind := range []string{loadgen.KindChat, loadgen.KindStream, loadgen.KindBad, loadgen.KindAbortStream, loadgen.KindAbortWhole} {
		if k := rep.Kinds[kind]; k == nil || k.Requests == 0 {
			t.Errorf("no %s requests were made", kind)
		}
	}
	if rep.Generation.N == 0 {
		t.Error("no generation was answered in full")
	}
	if rep.Overloaded == 0 || rep.NoRetryAfter > 0 {
		t.Errorf("%d overloaded answers (want some: %d clients, 8 queued), %d without Retry-After", rep.Overloaded, clients, rep.NoRetryAfter)
	}
	if rep.FIFOChecked < 10 || rep.FIFOInversions > 0 {
		t.Errorf("queue order: %d responses checked, %d out of arrival order", rep.FIFOChecked, rep.FIFOInversions)
	}
	// Leaks: compare the idle samples. The middle and the end are both
	// after plenty of load, so any growth between them is per request.
	start, ok1 := rep.Idle("start")
	mid, ok2 := rep.Idle("middle")
	end, ok3 := rep.Idle("end")
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("idle stats missing: %+v", rep.Samples)
	}
	if end.Goroutines > start.Goroutines+2 || end.OpenFDs > start.OpenFDs+2 {
		t.Errorf("goroutines %d -> %d -> %d, open files %d -> %d -> %d: leaking", start.Goroutines, mid.Goroutines, end.Goroutines, start.OpenFDs, mid.OpenFDs, end.OpenFDs)
	}
	if end.LiveTensors != start.LiveTensors {
		t.Errorf("live tensors %d -> %d -> %d: leaking", start.LiveTensors, mid.LiveTensors, end.LiveTensors)
	}
	if end.HeapInuse > mid.HeapInuse+8<<20 {
		t.Errorf("Go heap in use after GC %.1f -> %.1f -> %.1f MiB: growing", mib(start.HeapInuse), mib(mid.HeapInuse), mib(end.HeapInuse))
	}
	// RSS includes malloc arenas libtorch keeps; allow for their noise.
	if end.RSS > mid.RSS+64<<20 {
		t.Errorf("RSS %.1f -> %.1f -> %.1f MiB: growing", mib(uint64(start.RSS)), mib(uint64(mid.RSS)), mib(uint64(end.RSS)))
	}
	srv.mu.Lock()
	panics, errs := srv.panics, srv.errors
	srv.mu.Unlock()
	if panics > 0 || errs > 0 {
		t.Errorf("the server logged %d panics and %d errors:\n%s", panics, errs, srv.log())
	}
	// Batched, the requests did share forwards.
	if slices.Contains(args, "--max-num-seqs") {
		_, b := get(t, srv.url+"/metrics")
		steps, forwards := metricValue(string(b), "dllm_batch_steps_total"), metricValue(string(b), "dllm_batch_sequence_forwards_total")
		if !(steps > 0 && forwards > 1.5*steps) {
			t.Errorf("%v sequence forwards in %v batched steps: the requests did not run together", forwards, steps)
		}
		t.Logf("%.0f sequence forwards in %.0f batched steps", forwards, steps)
	}
	// Still serving, and it stops cleanly.
	resp, b := post(t, srv.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}`)
	decodeChat(t, resp, b)
	if err, _ := srv.stop(t, 30*time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, srv.log())
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// metricValue is the value of an unlabelled metric in Prometheus' text
// format, or -1.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// summary is the report in a few lines, for the test log.
func summary(r *loadgen.Report) string {
	var b strings.Builder
	secs := r.Duration.Seconds()
	fmt.Fprintf(&b, "%d clients, %.0f s: %d requests (%.0f/s); %d generations answered in full (%.1f/s): p50 %.1f ms, p90 %.1f, p99 %.1f, max %.1f\n",
		r.Clients, secs, r.Requests, float64(r.Requests)/secs, r.Generation.N, float64(r.Generation.N)/secs, r.Generation.P50, r.Generation.P90, r.Generation.P99, r.Generation.Max)
	for _, k := range []string{loadgen.KindChat, loadgen.KindStream, loadgen.KindCompletion, loadgen.KindAbortStream, loadgen.KindAbortWhole, loadgen.KindBad, loadgen.KindInfo} {
		if kr := r.Kinds[k]; kr != nil {
			fmt.Fprintf(&b, "  %-12s %6d requests, statuses %v", k, kr.Requests, kr.Statuses)
			if kr.Latency.N > 0 {
				fmt.Fprintf(&b, ", p50 %.1f ms p99 %.1f ms", kr.Latency.P50, kr.Latency.P99)
			}
			b.WriteByte('\n')
		}
	}
	fmt.Fprintf(&b, "overloaded: %d (%d without Retry-After); unexpected: %d; queue order: %d checked, %d inversions\n",
		r.Overloaded, r.NoRetryAfter, r.Unexpected, r.FIFOChecked, r.FIFOInversions)
	for _, s := range r.Samples {
		st := s.Stats
		fmt.Fprintf(&b, "  %6.1fs %-6s goroutines %3d heap %5.1f MiB rss %6.1f MiB fds %3d tensors %3d\n",
			s.At.Seconds(), s.Phase, st.Goroutines, mib(st.HeapInuse), mib(uint64(st.RSS)), st.OpenFDs, st.LiveTensors)
	}
	return b.String()
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
