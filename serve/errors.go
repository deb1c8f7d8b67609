package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
)

// apiError is an error response in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	// RetryAfter, in seconds, is sent as the Retry-After header when positive.
	RetryAfter int `json:"-"`
}

func (e *apiError) Error() string { return e.Message }

// Error types as OpenAI and vLLM name them, so clients map them to their
// exception classes.
const (
	typeInvalidRequest = "invalid_request_error"
	typeNotFound       = "not_found_error"
	typeServer         = "server_error"
	typeUnavailable    = "service_unavailable_error"
	typeTimeout        = "timeout_error"
)

func strPtr(s string) *string { return &s }

// badRequest is a 400 about one request field (param may be "").
func badRequest(param, message string) *apiError {
	e := &apiError{Status: http.StatusBadRequest, Message: message, Type: typeInvalidRequest}
	if param != "" {
		e.Param = strPtr(param)
	}
	return e
}

func newError(status int, typ, code, message string) *apiError {
	e := &apiError{Status: status, Message: message, Type: typ}
	if code != "" {
		e.Code = strPtr(code)
	}
	return e
}

// writeError sends e as the whole response.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}

// writeJSON sends v with the given status. HTML escaping is off so that
// model text such as "<think>" reads as written.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// marshal is json.Marshal without HTML escaping.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
