package serve

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Server; zero fields take the defaults noted.
type Config struct {
	// ModelName is the id reported by /v1/models and in responses; a
	// request that names another model is a 404.
	ModelName string
	// MaxQueue is how many requests may wait behind the running one before
	// more are refused with 503; 0 allows none to wait.
	MaxQueue int
	// RequestTimeout bounds a request, queueing included; 0 = none.
	RequestTimeout time.Duration
	// MaxBodyBytes caps a request body, and so a prompt's bytes; 0 = 4 MiB.
	MaxBodyBytes int64
	// MaxMessages caps a chat request's messages; 0 = DefaultMaxMessages.
	// The chat template's cost grows with them (100,000 tiny messages took
	// seconds of CPU and 1 GB of allocations).
	MaxMessages int
	// MaxPreparing is how many requests may decode, template and tokenize
	// at once (a quarter of them with bodies over 256 KiB); 0 = the CPUs
	// (GOMAXPROCS). Others wait up to 5 s, then get 503 with Retry-After.
	MaxPreparing int
	// DefaultMaxTokens is a chat completion's max_tokens when the request
	// gives none (still capped by the context); 0 = 32768.
	DefaultMaxTokens int
	// Logger receives one line per request; nil = slog.Default().
	Logger *slog.Logger
	// ShutdownGrace is how long Run lets requests in flight finish after
	// its context ends before cancelling them; 0 = DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// StallTimeout is how long one write to a client may block (the client
	// stopped reading but kept the connection open) before the client is
	// treated as gone and its generation stopped; 0 = DefaultStallTimeout.
	// Without it such a client would hold the model indefinitely: a blocked
	// write does not see the request's context.
	StallTimeout time.Duration
	// MaxConnections bounds the open client connections; 0 =
	// DefaultMaxConnections. It is lowered to fit the process's descriptor
	// limit. At the limit idle connections are closed to make room.
	MaxConnections int
	// APIKey, when set, must come with every request but GET /health, as
	// "Authorization: Bearer KEY" (OpenAI clients' api_key); others get 401.
	APIKey string
	// DebugStats serves GET /debug/stats (goroutines, memory, open files,
	// live tensors, queue) and marks responses with their queue order, for
	// load tests looking for leaks and unfairness. Off by default.
	DebugStats bool
}

// Defaults used when the Config leaves a field zero.
const (
	DefaultMaxBodyBytes     = 4 << 20
	DefaultMaxMessages      = 2048
	DefaultMaxConnections   = 4096
	DefaultStallTimeout     = 60 * time.Second
	DefaultChatMaxTokens    = 32768
	completionMaxTokens     = 16 // OpenAI's and vLLM's default for /v1/completions
	retryAfterLoadingSecs   = 5
	retryAfterQueueFullSecs = 2
)

// Server answers the HTTP API. It serves 503 until SetModel is called.
type Server struct {
	cfg     Config
	log     *slog.Logger
	model   atomic.Pointer[Model]
	queue   *queue
	gate    *gate
	created int64
	routes  map[string]map[string]http.HandlerFunc // path -> method -> handler
	active  sync.WaitGroup                         // generations in progress
	// shuttingDown tells a generation cancelled by shutdown from one whose
	// client hung up.
	shuttingDown atomic.Bool
	requests     atomic.Uint64 // requests answered, for /debug/stats
	metrics      *metrics      // GET /metrics
}

// New returns a server that is loading (503) until SetModel.
func New(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = DefaultChatMaxTokens
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxMessages <= 0 {
		cfg.MaxMessages = DefaultMaxMessages
	}
	if cfg.MaxPreparing <= 0 {
		cfg.MaxPreparing = runtime.GOMAXPROCS(0)
	}
	if cfg.MaxQueue < 0 {
		cfg.MaxQueue = 0
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	s := &Server{cfg: cfg, log: cfg.Logger, queue: newQueue(cfg.MaxQueue), gate: newGate(cfg.MaxPreparing, gateWait), created: time.Now().Unix(),
		metrics: newMetrics()}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.routes = map[string]map[string]http.HandlerFunc{
		"/health":              {"GET": s.handleHealth},
		"/v1/models":           {"GET": s.handleModels},
		"/v1/chat/completions": {"POST": s.handleChat},
		"/v1/completions":      {"POST": s.handleCompletions},
		"/metrics":             {"GET": s.handleMetrics},
	}
	if cfg.DebugStats {
		s.routes["/debug/stats"] = map[string]http.HandlerFunc{"GET": s.handleDebugStats}
	}
	return s
}

// SetModel makes the server ready.
func (s *Server) SetModel(m *Model) {
	s.queue.setSlots(m.MaxNumSeqs)
	s.model.Store(m)
}

// Ready reports whether a model is loaded.
func (s *Server) Ready() bool { return s.model.Load() != nil }

// ServeHTTP routes a request, logging it and turning a panic into a 500.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &recorder{ResponseWriter: w, start: time.Now(), rc: http.NewResponseController(w), stall: s.cfg.StallTimeout}
	// A keep-alive connection keeps the deadline its previous response
	// left (see finish); this response sets its own as it writes.
	rec.rc.SetWriteDeadline(time.Time{})
	defer s.finish(rec, r)
	path := r.URL.Path
	if onSpare(r) {
		// A connection past the limit (see connLimit) answers /health, so
		// that a full server can still be probed, and nothing else.
		rec.Header().Set("Connection", "close")
		if path != "/health" {
			e := newError(http.StatusServiceUnavailable, typeUnavailable, "too_many_connections", "the server has too many open connections; retry shortly")
			e.RetryAfter = retryAfterBusySecs
			writeError(rec, e)
			return
		}
	}
	// Before routing, so that a stranger learns nothing, not even which
	// routes exist. /health stays open for load balancers and serve.sh.
	if s.cfg.APIKey != "" && path != "/health" {
		if e := s.authorize(r); e != nil {
			rec.Header().Set("WWW-Authenticate", `Bearer realm="dllm"`)
			writeError(rec, e)
			return
		}
	}
	methods, ok := s.routes[path]
	if !ok && strings.HasPrefix(path, "/v1/models/") {
		methods, ok = map[string]http.HandlerFunc{"GET": s.handleModel}, true
	}
	if !ok {
		writeError(rec, newError(http.StatusNotFound, typeNotFound, "not_found", "no route for "+r.Method+" "+path))
		return
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	h, ok := methods[method]
	if !ok {
		allow := make([]string, 0, len(methods))
		for m := range methods {
			allow = append(allow, m)
		}
		slices.Sort(allow)
		rec.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(rec, newError(http.StatusMethodNotAllowed, typeInvalidRequest, "method_not_allowed",
			r.Method+" is not allowed on "+path+"; use "+strings.Join(allow, ", ")))
		return
	}
	h(rec, r)
}

// loaded returns the model, or writes 503 and returns nil while loading.
func (s *Server) loaded(w http.ResponseWriter) *Model {
	m := s.model.Load()
	if m == nil {
		e := newError(http.StatusServiceUnavailable, typeUnavailable, "model_loading", "the model is still loading; retry shortly")
		e.RetryAfter = retryAfterLoadingSecs
		writeError(w, e)
	}
	return m
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !s.Ready() {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading"})
		return
	}
	running, waiting, slots := s.queue.depth()
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "running": running, "waiting": waiting, "max_num_seqs": slots})
}

// modelCard is one entry of /v1/models.
type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len"`
	// MaxNumSeqs is how many requests the server generates for at once
	// (--max-num-seqs): the concurrency a client needs to fill it.
	MaxNumSeqs int `json:"max_num_seqs"`
}

func (s *Server) card(m *Model) modelCard {
	return modelCard{ID: s.cfg.ModelName, Object: "model", Created: s.created, OwnedBy: "dllm", MaxModelLen: m.ContextLength, MaxNumSeqs: max(m.MaxNumSeqs, 1)}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	m := s.loaded(w)
	if m == nil {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []modelCard{s.card(m)}})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	m := s.loaded(w)
	if m == nil {
		return
	}
	if id := strings.TrimPrefix(r.URL.Path, "/v1/models/"); id != s.cfg.ModelName {
		writeError(w, newError(http.StatusNotFound, typeNotFound, "model_not_found", "the model "+id+" does not exist; this server has "+s.cfg.ModelName))
		return
	}
	writeJSON(w, http.StatusOK, s.card(m))
}

// authorize checks the request's bearer token against Config.APIKey.
func (s *Server) authorize(r *http.Request) *apiError {
	scheme, token, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return newError(http.StatusUnauthorized, typeInvalidRequest, "invalid_api_key",
			"this server needs an API key: send it as the header Authorization: Bearer KEY (the api_key of OpenAI clients)")
	}
	if !sameKey(strings.TrimSpace(token), s.cfg.APIKey) {
		return newError(http.StatusUnauthorized, typeInvalidRequest, "invalid_api_key", "incorrect API key")
	}
	return nil
}

// sameKey compares in constant time. Hashing first hides the key's length
// too, which a plain ConstantTimeCompare would leak.
func sameKey(got, want string) bool {
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
