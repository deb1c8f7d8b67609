package serve

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"
)

// reqStats are what a generation reports to the request's log line.
type reqStats struct {
	promptTokens int
	genTokens    int
	steps        int
	tpf          float64
	prefill      time.Duration
	genTime      time.Duration // after the prefill
	queued       time.Duration
	finish       string
	err          string
	status       int  // logged instead of the sent one (499: the client hung up)
	ran          bool // the request got its turn on the model
}

// recorder remembers the status and bytes written, for the log line and to
// know whether a 500 can still be sent after a panic.
type recorder struct {
	http.ResponseWriter
	start  time.Time
	status int
	bytes  int64
	stats  *reqStats
	// rc controls the underlying writer: each write may block for at most
	// stall (Config.StallTimeout).
	rc    *http.ResponseController
	stall time.Duration
}

// armDeadline bounds the next write. Writers without deadlines (test
// recorders) just go without.
func (r *recorder) armDeadline() {
	if r.rc != nil && r.stall > 0 {
		r.rc.SetWriteDeadline(time.Now().Add(r.stall))
	}
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.armDeadline()
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Flush lets streamed responses reach the client block by block.
func (r *recorder) Flush() { r.FlushError() }

// FlushError is Flush reporting failure (http.ResponseController prefers
// it), so that a stream notices a client that is gone or stalled at once
// rather than at some later write.
func (r *recorder) FlushError() error {
	r.armDeadline()
	if r.rc == nil {
		if f, ok := r.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		return nil
	}
	return r.rc.Flush()
}

// Unwrap gives http.ResponseController the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// statsOf is the stats record of a request, for its handler to fill.
func statsOf(w http.ResponseWriter) *reqStats {
	if rec, ok := w.(*recorder); ok {
		if rec.stats == nil {
			rec.stats = &reqStats{}
		}
		return rec.stats
	}
	return &reqStats{}
}

// statusClientClosed is nginx's code for a client that hung up, used in
// logs only (nothing can be sent to such a client).
const statusClientClosed = 499

// finish recovers a handler's panic and logs the request. It is deferred
// by ServeHTTP, so recover sees the handler's panic.
func (s *Server) finish(rec *recorder, r *http.Request) {
	if p := recover(); p != nil {
		if p == http.ErrAbortHandler {
			panic(p) // net/http's way to abort a response; it logs nothing
		}
		s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		e := newError(http.StatusInternalServerError, typeServer, "internal_error", "internal server error")
		switch {
		case rec.status == 0:
			writeError(rec, e)
		case strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream"):
			// The stream has begun: end it the way a stream reports errors.
			sse := newSSEWriter(rec)
			sse.started = true
			sse.sendError(e)
			rec.status = http.StatusInternalServerError
		default:
			rec.status = http.StatusInternalServerError
		}
	}
	// net/http flushes the end of the response after the handler returns;
	// that write is bounded too.
	rec.armDeadline()
	s.requests.Add(1)
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	if rec.stats != nil && rec.stats.status != 0 {
		status = rec.stats.status
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Duration("duration", time.Since(rec.start)),
	}
	if st := rec.stats; st != nil {
		s.metrics.record(st, status, time.Since(rec.start))
		tokPerSec := 0.0
		if st.genTime > 0 {
			tokPerSec = float64(st.genTokens) / st.genTime.Seconds()
		}
		attrs = append(attrs, slog.Int("prompt_tokens", st.promptTokens))
		// A request that never reached the model (refused, or given up
		// while queued) has no generation to report.
		if st.ran {
			attrs = append(attrs,
				slog.Int("generated_tokens", st.genTokens),
				slog.Int("steps", st.steps),
				slog.Float64("tpf", round2(st.tpf)),
				slog.Float64("tok_s", round2(tokPerSec)),
				slog.Duration("prefill", st.prefill),
			)
		}
		attrs = append(attrs, slog.Duration("queued", st.queued))
		if st.finish != "" {
			attrs = append(attrs, slog.String("finish", st.finish))
		}
		if st.err != "" {
			attrs = append(attrs, slog.String("error", st.err))
		}
	}
	level := slog.LevelInfo
	switch {
	case status == http.StatusServiceUnavailable:
		level = slog.LevelWarn // loading, busy or stopping: expected, not a fault
	case status >= 500:
		level = slog.LevelError
	}
	s.log.LogAttrs(r.Context(), level, "request", attrs...)
}

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }
