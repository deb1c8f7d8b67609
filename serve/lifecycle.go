package serve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// DefaultShutdownGrace is how long in-flight requests may run on after
// SIGTERM before their generations are cancelled.
const DefaultShutdownGrace = 5 * time.Second

// Loader loads the model; it runs while the server already answers
// /health with 503.
type Loader func(ctx context.Context) (*Model, error)

// Run serves on ln until ctx is done (SIGINT/SIGTERM), loading the model
// with load in the background. A load failure stops the server and is
// returned. On shutdown it stops accepting connections, lets requests in
// flight finish for cfg.ShutdownGrace, then cancels their generations and
// returns nil once they have stopped.
func Run(ctx context.Context, ln net.Listener, cfg Config, load Loader) error {
	s := New(cfg)
	cfg = s.cfg
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	limited := newConnLimit(jsonErrors{ln}, connectionLimit(cfg.MaxConnections, raiseOpenFileLimit(), s.log), s.log)
	srv := &http.Server{
		Handler:   s,
		ConnState: limited.track,
		// Marks the spare connections the limiter lets in past the limit.
		ConnContext:       connContext,
		ReadHeaderTimeout: 10 * time.Second,
		// The whole request, body included (at most MaxBodyBytes): a client
		// trickling its body must not hold a connection for ever. It does
		// not limit responses: net/http lifts it once the body is read.
		ReadTimeout: time.Minute,
		// Idle keep-alive connections cost a descriptor each; clients
		// reconnect in a millisecond (uvicorn, under vLLM, keeps them 5 s).
		IdleTimeout: time.Minute,
		// No write timeout: a long reasoning stream may take many minutes.
		BaseContext: func(net.Listener) context.Context { return base },
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if cfg.APIKey == "" && !isLoopback(ln.Addr()) {
		s.log.Warn("no API key: anyone who can reach this address can use the server; set --api-key, --api-key-file or DLLM_API_KEY, or listen on 127.0.0.1", "addr", ln.Addr().String())
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(limited) }()

	loadCtx, cancelLoad := context.WithCancel(ctx)
	defer cancelLoad()
	loaded := make(chan error, 1)
	go func() {
		start := time.Now()
		m, err := load(loadCtx)
		if err != nil {
			loaded <- err
			return
		}
		s.SetModel(m)
		d := m.Defaults
		attrs := []any{"model", cfg.ModelName, "url", URL(ln.Addr()), "load_time", time.Since(start).Round(time.Millisecond), "context", m.ContextLength,
			"block", d.BlockSize, "threshold", d.Threshold, "verify", d.Verify, "max_num_seqs", max(m.MaxNumSeqs, 1)}
		if m.KVCacheBytes > 0 {
			attrs = append(attrs, "kv_cache", bytesText(m.KVCacheBytes))
		}
		s.log.Info("ready", attrs...)
		loaded <- nil
	}()

	var result error
	for done := false; !done; {
		select {
		case err := <-loaded:
			if err != nil {
				result = fmt.Errorf("loading the model: %w", err)
				done = true
			}
		case err := <-served:
			return fmt.Errorf("serving: %w", err)
		case <-ctx.Done():
			s.log.Info("shutting down", "grace", cfg.ShutdownGrace)
			done = true
		}
	}
	s.shuttingDown.Store(true)
	graceCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(graceCtx); err != nil {
		// Generations still running after the grace period are cancelled;
		// each returns promptly and its handler reports 503.
		cancelBase()
		waitCtx, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelWait()
		srv.Shutdown(waitCtx)
		srv.Close()
	}
	// A generation that ignored cancellation still uses the model.
	if waitGroup(&s.active, 10*time.Second) {
		if m := s.model.Load(); m != nil && m.Close != nil {
			m.Close()
		}
	}
	s.log.Info("stopped")
	return result
}

// waitGroup waits for wg, at most d, and reports whether it finished.
func waitGroup(wg interface{ Wait() }, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// URL is the base URL clients use for a listener's address; a wildcard
// host is shown as localhost.
func URL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// isLoopback reports whether addr can be reached only from this machine.
func isLoopback(addr net.Addr) bool {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// fdReserve is the descriptors kept from client connections for the model's
// files, libtorch, logs and the spare connections.
const fdReserve = 256 + spareConns

// connectionLimit is want, lowered (with a warning) to fit a descriptor
// limit of fds (0: unknown).
func connectionLimit(want int, fds uint64, log *slog.Logger) int {
	if fds == 0 || uint64(want)+fdReserve <= fds {
		return want
	}
	n := max(int(fds)-fdReserve, 16)
	log.Warn("--max-connections lowered to fit the open-file limit (raise it with ulimit -n)", "max_connections", n, "asked", want, "open_file_limit", fds)
	return n
}

// bytesText is n bytes in MiB, or GiB from 1 GiB on.
func bytesText(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
