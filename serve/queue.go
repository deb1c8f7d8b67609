package serve

import (
	"context"
	"errors"
	"sync"
)

// errQueueFull is returned by enqueue when max requests are already waiting.
var errQueueFull = errors.New("queue full")

// queue hands the model to one request at a time, in arrival order, with
// at most max requests waiting behind the running one. A request that
// gives up while waiting leaves the queue at once and frees its place.
type queue struct {
	mu      sync.Mutex
	busy    bool
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

func newQueue(max int) *queue { return &queue{max: max} }

// enqueue takes a place in line, or fails at once with errQueueFull so that
// the client can be told to retry instead of waiting unboundedly.
func (q *queue) enqueue() (*ticket, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busy && len(q.waiting) >= q.max {
		return nil, errQueueFull
	}
	q.arrivals++
	t := &ticket{q: q, granted: make(chan struct{}), seq: q.arrivals}
	if !q.busy {
		q.busy = true
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

// release gives the model to the next waiting request, if any.
func (q *queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.busy = false
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

// depth reports the running request (0 or 1) and the number waiting.
func (q *queue) depth() (running, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busy {
		running = 1
	}
	return running, len(q.waiting)
}
