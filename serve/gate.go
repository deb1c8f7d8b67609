package serve

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// gate bounds the CPU work a request does before it joins the queue
// (decoding, the chat template, tokenizing): at most cap(slots) requests do
// it at once, and of those at most cap(heavy) have large bodies, so that a
// flood of megabyte prompts neither takes every core nor keeps small
// requests waiting behind it. Without it that work had no bound at all: it
// happens before the queue, whose limit only counts requests ready to
// generate.
type gate struct {
	slots chan struct{}
	heavy chan struct{}
	// wait is how long a request may wait for its slots before a 503.
	wait time.Duration
}

// heavyBytes is the body size from which a request counts as heavy: about
// 60k tokens of text, tens of milliseconds of templating and tokenizing.
const heavyBytes = 256 << 10

// gateWait is how long a request waits for a slot before it is refused:
// long enough for several heavy requests to pass, short enough that a
// client hears "busy" instead of timing out.
const gateWait = 5 * time.Second

// retryAfterBusySecs is the Retry-After of a request refused by the gate.
const retryAfterBusySecs = 1

func newGate(n int, wait time.Duration) *gate {
	n = max(n, 1)
	return &gate{slots: make(chan struct{}, n), heavy: make(chan struct{}, max(n/4, 1)), wait: wait}
}

// enter waits for the slots a body of size bytes needs and returns the
// function that gives them back, or a 503 with Retry-After when none came
// within the wait (or the client left).
func (g *gate) enter(ctx context.Context, size int) (func(), *apiError) {
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	take := func(c chan struct{}) *apiError {
		select {
		case c <- struct{}{}:
			return nil
		case <-timer.C:
		case <-ctx.Done():
		}
		e := newError(http.StatusServiceUnavailable, typeUnavailable, "server_busy",
			fmt.Sprintf("the server is busy preparing other requests (waited %v); retry shortly", g.wait))
		e.RetryAfter = retryAfterBusySecs
		return e
	}
	if size >= heavyBytes {
		if e := take(g.heavy); e != nil {
			return nil, e
		}
	}
	if e := take(g.slots); e != nil {
		if size >= heavyBytes {
			<-g.heavy
		}
		return nil, e
	}
	return func() {
		<-g.slots
		if size >= heavyBytes {
			<-g.heavy
		}
	}, nil
}

// prepare reads the request's body and hands it to parse (decoding,
// templating, tokenizing) inside the gate. On failure it writes the error
// and reports false.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, parse func(body []byte) *apiError) bool {
	body, e := readBody(w, r, s.cfg.MaxBodyBytes)
	if e == nil {
		var done func()
		if done, e = s.gate.enter(r.Context(), len(body)); e != nil {
			statsOf(w).err = "busy preparing"
		} else {
			e = parse(body)
			done()
		}
	}
	if e != nil {
		writeError(w, e)
		return false
	}
	return true
}
