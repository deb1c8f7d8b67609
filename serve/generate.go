package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"dllm/diffusion"
)

// errContextTooLong marks an engine error for a prompt that does not fit;
// the sampler adapter wraps diffusion's error with it.
var errContextTooLong = errors.New("prompt does not fit the context")

// errInvalidRequest marks an engine error for options or a prompt it
// cannot run (answered with 400).
var errInvalidRequest = errors.New("invalid request")

// errClientGone marks a failed write: the client hung up.
var errClientGone = errors.New("client disconnected")

// responder is how an endpoint presents a generation.
type responder interface {
	// begin is called once the request has its place in the queue; a
	// stream sends its headers and first chunk here.
	begin() error
	// text receives generated text as it becomes final.
	text(delta string) error
	// end presents the finished generation.
	end(out *outcome) error
	// fail presents an error.
	fail(e *apiError)
}

// outcome is a finished generation.
type outcome struct {
	text             string // all generated text, cut at a stop string
	finish           string // "stop" or "length"
	promptTokens     int
	completionTokens int
	steps            int // model forwards after the prefill (usage.dllm)
	checked          int // with verify: drafted tokens checked (usage.dllm)
	accepted         int // and kept
}

// run queues p, generates and hands the text to out. It holds the engine
// only while generating, and gives it up when the client hangs up, the
// request times out or the server shuts down.
func (s *Server) run(w http.ResponseWriter, r *http.Request, m *Model, p *genParams, out responder) {
	st := statsOf(w)
	st.promptTokens = len(p.prompt)
	t, err := s.queue.enqueue()
	if err != nil {
		e := newError(http.StatusServiceUnavailable, typeUnavailable, "queue_full",
			fmt.Sprintf("the server is busy: %d requests are waiting; retry later", s.cfg.MaxQueue))
		e.RetryAfter = retryAfterQueueFullSecs
		st.err = "queue full"
		out.fail(e)
		return
	}
	queuedAt := time.Now()
	if s.cfg.DebugStats {
		w.Header().Set("X-Dllm-Queue-Seq", strconv.FormatUint(t.seq, 10))
	}
	ctx := r.Context()
	if s.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.cfg.RequestTimeout, errTimeout)
		defer cancel()
	}
	if err := out.begin(); err != nil {
		t.cancel()
		s.stopped(st, out, errClientGone)
		return
	}
	err = t.wait(ctx)
	// The wait is logged whether or not it ended in a turn: a request
	// given up in the queue waited too.
	st.queued = time.Since(queuedAt)
	if err != nil {
		s.stopped(st, out, context.Cause(ctx))
		return
	}
	defer s.queue.release()
	if s.cfg.DebugStats {
		// Only whole responses can still carry it: a stream's headers are out.
		w.Header().Set("X-Dllm-Grant-Seq", strconv.FormatUint(t.grant, 10))
	}
	s.active.Add(1)
	defer s.active.Done()
	st.ran = true

	ts := newTextStream(m.Tokenizer, m.keepToken, p.stops)
	var writeErr error
	onBlock := func(b diffusion.Block) (bool, error) {
		st.genTokens += len(b.IDs)
		delta, stop := ts.add(b.IDs)
		if delta != "" {
			if err := out.text(delta); err != nil {
				writeErr = err
				return true, fmt.Errorf("%w: %v", errClientGone, err)
			}
		}
		return stop, nil
	}
	res, err := m.Engine.Generate(ctx, p.prompt, p.opts, onBlock)
	if err == nil {
		st.genTokens, st.steps, st.tpf = len(res.IDs), res.Steps, res.TPF
		st.prefill, st.genTime = res.Prefill, res.Duration-res.Prefill
	}
	switch {
	case writeErr != nil:
		s.stopped(st, out, errClientGone)
		return
	case err != nil && ctx.Err() != nil:
		s.stopped(st, out, context.Cause(ctx))
		return
	case errors.Is(err, errContextTooLong):
		st.err = err.Error()
		out.fail(contextError(m.ContextLength, len(p.prompt)))
		return
	case errors.Is(err, errInvalidRequest):
		st.err = err.Error()
		out.fail(badRequest("", err.Error()))
		return
	case err != nil:
		st.err = err.Error()
		s.log.Error("generation failed", "error", err)
		out.fail(newError(http.StatusInternalServerError, typeServer, "generation_failed", "generation failed: "+err.Error()))
		return
	}
	if delta, _ := ts.finish(); delta != "" {
		if err := out.text(delta); err != nil {
			s.stopped(st, out, errClientGone)
			return
		}
	}
	o := &outcome{text: ts.String(), finish: res.FinishReason, promptTokens: len(p.prompt), completionTokens: len(res.IDs), steps: res.Steps,
		checked: res.Checked, accepted: res.Accepted}
	if ts.stopped {
		o.finish = "stop"
	}
	st.finish = o.finish
	if err := out.end(o); err != nil {
		st.status = statusClientClosed
	}
}

// errTimeout is the cause of a request's context when RequestTimeout ends it.
var errTimeout = errors.New("request timed out")

// stopped reports a generation that ended early: the client hung up (only
// logged), the timeout expired (504) or the server is shutting down (503).
func (s *Server) stopped(st *reqStats, out responder, cause error) {
	switch {
	case errors.Is(cause, errTimeout):
		st.err = fmt.Sprintf("timed out after %v", s.cfg.RequestTimeout)
		out.fail(newError(http.StatusGatewayTimeout, typeTimeout, "timeout",
			fmt.Sprintf("the request took longer than the server's limit of %v", s.cfg.RequestTimeout)))
	case s.shuttingDown.Load():
		st.err = "server shutting down"
		e := newError(http.StatusServiceUnavailable, typeUnavailable, "shutting_down", "the server is shutting down")
		e.RetryAfter = retryAfterLoadingSecs
		out.fail(e)
	default:
		st.err = "client disconnected"
		st.status = statusClientClosed
	}
}
