package serve

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit is a listener that bounds the connections a server holds open.
// At the limit a new connection first takes the place of the longest-idle
// keep-alive connection, then of the oldest one that has not finished
// sending its request headers for staleNew; only when every connection is
// busy does it become a spare: served one request and closed, with
// anything but /health refused with a 503. A few spares (Config's
// spareConns) keep /health answerable while the server is full; past them
// connections are closed at once. Idle connections once piled up until the
// process ran out of descriptors, and then even /health stopped answering.
type connLimit struct {
	net.Listener
	max, spares int
	log         *slog.Logger

	mu       sync.Mutex
	conns    map[net.Conn]*connInfo // counted connections
	inSpare  int
	lastWarn time.Time
}

// connInfo is what the limiter knows of a connection.
type connInfo struct {
	state http.ConnState
	since time.Time // when it entered state
}

// staleNew is how long a connection may take to send its first request's
// headers before a new connection may take its place at the limit.
const staleNew = 2 * time.Second

// spareConns is how many connections past the limit are kept to answer
// /health; they count against the descriptor limit's reserve.
const spareConns = 32

func newConnLimit(ln net.Listener, max int, log *slog.Logger) *connLimit {
	return &connLimit{Listener: ln, max: max, spares: spareConns, log: log, conns: map[net.Conn]*connInfo{}}
}

// spareConn is a connection accepted past the limit.
type spareConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

// Close gives the spare's place back.
func (c *spareConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.inSpare--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// Accept returns the next connection, making room for it as the type's
// comment says.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		now := time.Now()
		l.mu.Lock()
		if len(l.conns) >= l.max {
			l.evictLocked(now)
		}
		switch {
		case len(l.conns) < l.max:
			l.conns[c] = &connInfo{state: http.StateNew, since: now}
			l.mu.Unlock()
			return c, nil
		case l.inSpare < l.spares:
			l.inSpare++
			l.warnLocked(now)
			l.mu.Unlock()
			return &spareConn{Conn: c, l: l}, nil
		}
		l.warnLocked(now)
		l.mu.Unlock()
		c.Close()
	}
}

// evictLocked closes the longest-idle connection, else the oldest one
// still sending headers after staleNew. Closing it ends the server's read
// on it; the server then forgets it.
func (l *connLimit) evictLocked(now time.Time) {
	var victim net.Conn
	var vi *connInfo
	for c, ci := range l.conns {
		switch {
		case ci.state == http.StateIdle && (vi == nil || vi.state != http.StateIdle || ci.since.Before(vi.since)):
		case ci.state == http.StateNew && now.Sub(ci.since) >= staleNew && (vi == nil || vi.state == http.StateNew && ci.since.Before(vi.since)):
		default:
			continue
		}
		victim, vi = c, ci
	}
	if victim != nil {
		delete(l.conns, victim)
		victim.Close()
	}
}

// warnLocked logs, at most once a minute, that the limit was reached.
func (l *connLimit) warnLocked(now time.Time) {
	if now.Sub(l.lastWarn) < time.Minute {
		return
	}
	l.lastWarn = now
	l.log.Warn("connection limit reached: every connection is busy; new ones are answered only on /health (see --max-connections)", "max", l.max)
}

// track follows the server's view of each connection (http.Server's
// ConnState).
func (l *connLimit) track(c net.Conn, state http.ConnState) {
	if _, ok := c.(*spareConn); ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ci, ok := l.conns[c]
	switch {
	case !ok:
	case state == http.StateClosed || state == http.StateHijacked:
		delete(l.conns, c)
	default:
		ci.state, ci.since = state, time.Now()
	}
}

// spareKey marks the context of a request on a spare connection.
type spareKey struct{}

// connContext marks requests on spare connections (http.Server's
// ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.(*spareConn); ok {
		return context.WithValue(ctx, spareKey{}, true)
	}
	return ctx
}

// onSpare reports whether r came on a spare connection.
func onSpare(r *http.Request) bool {
	v, _ := r.Context().Value(spareKey{}).(bool)
	return v
}
