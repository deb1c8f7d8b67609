package serve

import (
	"net/http"
)

// sseWriter sends Server-Sent Events as OpenAI streams them: one
// "data: JSON" line per chunk, then "data: [DONE]".
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// begin sends the response headers; the status is 200 from here on.
func (s *sseWriter) begin() error {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // tell nginx-like proxies not to buffer
	s.w.WriteHeader(http.StatusOK)
	s.started = true
	return s.rc.Flush()
}

// send writes one event and flushes it to the client.
func (s *sseWriter) send(v any) error {
	b, err := marshal(v)
	if err != nil {
		return err
	}
	return s.raw(b)
}

// done ends the stream.
func (s *sseWriter) done() error { return s.raw([]byte("[DONE]")) }

func (s *sseWriter) raw(b []byte) error {
	buf := make([]byte, 0, len(b)+8)
	buf = append(append(append(buf, "data: "...), b...), "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// sendError reports an error inside a started stream, where the status
// can no longer change, as vLLM does: an error event, then [DONE].
func (s *sseWriter) sendError(e *apiError) {
	if s.send(struct {
		Error *apiError `json:"error"`
	}{e}) == nil {
		s.done()
	}
}
