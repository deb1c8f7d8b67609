package serve

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// goErrorHeaders is how net/http's own replies to requests it cannot parse
// (400 malformed, 431 headers too large, 501 transfer coding, 505 version)
// end their headers; it writes each such reply to the connection in one
// Write, before any handler runs.
const goErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// jsonErrors is a listener whose connections turn those plain-text replies
// into the OpenAI error shape every other answer has, so that a client
// parsing error bodies is not handed text. Handlers never send text/plain,
// so nothing else matches.
type jsonErrors struct{ net.Listener }

// Accept wraps the connection.
func (l jsonErrors) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrorConn{Conn: c}, nil
}

// jsonErrorConn rewrites net/http's plain-text error replies as it writes.
type jsonErrorConn struct{ net.Conn }

// Write sends b, or its JSON form when b is one of net/http's replies; it
// reports b's length either way, as the writer expects.
func (c *jsonErrorConn) Write(b []byte) (int, error) {
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 ")) || !bytes.Contains(b, []byte(goErrorHeaders)) {
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(jsonReply(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// jsonReply rewrites "HTTP/1.1 CODE Text[: detail]<goErrorHeaders>body" as
// a JSON error response with the same status.
func jsonReply(b []byte) []byte {
	statusLine, rest, _ := strings.Cut(string(b), goErrorHeaders[:2])
	_, body, _ := strings.Cut(rest, "\r\n\r\n")
	code, err := strconv.Atoi(strings.Fields(statusLine + " x x")[1])
	if err != nil || code < 400 || code > 599 {
		code = http.StatusBadRequest
	}
	// All are the client's doing, whatever the status's class.
	e := newError(code, typeInvalidRequest, strings.ToLower(strings.ReplaceAll(http.StatusText(code), " ", "_")), body)
	payload, _ := marshal(struct {
		Error *apiError `json:"error"`
	}{e})
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		code, http.StatusText(code), len(payload), payload)
}
