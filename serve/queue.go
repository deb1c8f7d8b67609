package serve

import (
	"context"
	"errors"
	"sync"
)

// errQueueFull is returned by enqueue when max requests are already waiting.
var errQueueFull = errors.New("queue full")

// queue hands the model to up to slots requests at a time (the
// sequences the engine runs together), in arrival order, with at most max
// requests waiting behind the running ones. A request that gives up while
// waiting leaves the queue at once and frees its place.
type queue struct {
	mu      sync.Mutex
	running int
	slots   int
	waiting []*ticket
	max     int
	// arrivals and grants count tickets issued and turns handed out, so
	// that tests under load can check the order (Config.DebugStats).
	arrivals, grants uint64
}

// ticket is a place in the queue; granted is closed when its turn comes.
type ticket struct {
	q       *queue
	granted chan struct{}
	// seq is the ticket's arrival number (from 1); grant its turn's number,
	// set before granted is closed.
	seq, grant uint64
}

func newQueue(max int) *queue { return &queue{max: max, slots: 1} }

// setSlots lets up to n requests run at once (at least 1), granting
// waiting ones their turn when n grows.
func (q *queue) setSlots(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.slots = max(n, 1)
	for q.running < q.slots && len(q.waiting) > 0 {
		next := q.waiting[0]
		q.waiting = q.waiting[1:]
		q.running++
		q.grantLocked(next)
	}
}

// enqueue takes a place in line, or fails at once with errQueueFull so that
// the client can be told to retry instead of waiting unboundedly.
func (q *queue) enqueue() (*ticket, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running >= q.slots && len(q.waiting) >= q.max {
		return nil, errQueueFull
	}
	q.arrivals++
	t := &ticket{q: q, granted: make(chan struct{}), seq: q.arrivals}
	if q.running < q.slots {
		q.running++
		q.grantLocked(t)
		return t, nil
	}
	q.waiting = append(q.waiting, t)
	return t, nil
}

// wait blocks until the ticket's turn or until ctx is done. After a nil
// return the caller holds the model and must call release.
func (t *ticket) wait(ctx context.Context) error {
	select {
	case <-t.granted:
		return nil
	case <-ctx.Done():
		t.cancel()
		return ctx.Err()
	}
}

// cancel gives up the ticket: it leaves the line, or if its turn has
// already come, passes the turn on.
func (t *ticket) cancel() {
	q := t.q
	q.mu.Lock()
	for i, w := range q.waiting {
		if w == t {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			q.mu.Unlock()
			return
		}
	}
	q.mu.Unlock()
	q.release()
}

// release gives the running request's place to the next waiting one, if
// any.
func (q *queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 || q.running > q.slots {
		q.running--
		return
	}
	next := q.waiting[0]
	q.waiting = q.waiting[1:]
	q.grantLocked(next)
}

// grantLocked gives t its turn; q.mu is held.
func (q *queue) grantLocked(t *ticket) {
	q.grants++
	t.grant = q.grants
	close(t.granted)
}

// depth reports the requests running and waiting, and how many may run.
func (q *queue) depth() (running, waiting, slots int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running, len(q.waiting), q.slots
}
