package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits on request fields; beyond them a request is a 400.
const (
	maxStops   = 16
	maxStopLen = 1024
)

// samplingFields are the fields /v1/chat/completions and /v1/completions
// share. Pointers tell "absent" from zero: absent fields take the model's
// defaults.
type samplingFields struct {
	Model               string   `json:"model"`
	MaxTokens           *int64   `json:"max_tokens"`
	MaxCompletionTokens *int64   `json:"max_completion_tokens"`
	Temperature         *float64 `json:"temperature"`
	TopP                *float64 `json:"top_p"`
	Stop                stopList `json:"stop"`
	Seed                *int64   `json:"seed"`
	Stream              bool     `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N        *int64          `json:"n"`
	Logprobs json.RawMessage `json:"logprobs"`
	// Threshold is a dllm extension: the confidence above which a masked
	// position is committed in a denoising step (lower is faster).
	Threshold *float64 `json:"threshold"`
	// TokensPerStep is a dllm extension for benchmarks: commit exactly
	// this many positions per denoising step, whatever their confidence,
	// so speed does not depend on the weights.
	TokensPerStep *int64 `json:"tokens_per_step"`
	// MaxCommit is a dllm extension: at most this many positions are
	// committed in one denoising step (the most confident above the
	// threshold); 0 = no cap.
	MaxCommit *int64 `json:"max_commit"`
	// MinCommit is a dllm extension: at least this many positions are
	// committed in one denoising step (the most confident).
	MinCommit *int64 `json:"min_commit"`
	// ErrorBudget is a dllm extension replacing the threshold: a step
	// commits the most confident positions while their summed
	// probabilities of being wrong stay within it.
	ErrorBudget *float64 `json:"error_budget"`
	// Verify is a dllm extension: every drafted block is checked against
	// the model's own greedy left-to-right prediction, and only what it
	// agrees with is output (greedy only).
	Verify *bool `json:"verify"`
	// IgnoreEOS is vLLM's extension, for benchmarks: generate to the length
	// limit through end-of-sequence tokens (stop strings still apply).
	IgnoreEOS bool `json:"ignore_eos"`
	// BlockSize is the diffusion block size of this request, 1 up to the
	// one the model was trained for (dllm.json's block_size, the default).
	BlockSize *int64 `json:"block_size"`

	// Fields other servers and dLLM tools take that dllm does not: a
	// request that uses them is refused (400) rather than silently served
	// without them. Defaults that change nothing are accepted.
	Steps          json.RawMessage `json:"steps"`
	Remasking      *string         `json:"remasking"`
	TopK           *int64          `json:"top_k"`
	ResponseFormat json.RawMessage `json:"response_format"`
	Tools          json.RawMessage `json:"tools"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	Functions      json.RawMessage `json:"functions"`
	LogitBias      json.RawMessage `json:"logit_bias"`
}

// unsupported refuses the fields dllm does not implement, naming what it
// does instead.
func (f *samplingFields) unsupported() *apiError {
	set := func(raw json.RawMessage) bool {
		t := strings.TrimSpace(string(raw))
		return t != "" && t != "null" && t != "[]" && t != "{}"
	}
	switch {
	case set(f.Steps):
		return badRequest("steps", "steps is not supported: dllm denoises block by block, committing every position above threshold (or tokens_per_step positions) each step")
	case f.Remasking != nil && *f.Remasking != "low_confidence":
		return badRequest("remasking", fmt.Sprintf("remasking %q is not supported: dllm commits the most confident positions (\"low_confidence\")", *f.Remasking))
	case f.TopK != nil && *f.TopK > 0:
		return badRequest("top_k", "top_k is not supported; use top_p (nucleus sampling)")
	case set(f.ResponseFormat) && !isJSONObject(f.ResponseFormat, `{"type":"text"}`):
		return badRequest("response_format", "response_format is not supported (no JSON mode or schemas); only {\"type\": \"text\"}")
	case set(f.Tools), set(f.Functions):
		return badRequest("tools", "tools and function calling are not supported")
	case set(f.ToolChoice) && strings.TrimSpace(string(f.ToolChoice)) != `"none"` && strings.TrimSpace(string(f.ToolChoice)) != `"auto"`:
		return badRequest("tool_choice", "tool_choice is not supported (no tools)")
	case set(f.LogitBias):
		return badRequest("logit_bias", "logit_bias is not supported")
	}
	return nil
}

// isJSONObject reports whether raw is the same JSON object as want.
func isJSONObject(raw json.RawMessage, want string) bool {
	var a, b map[string]any
	if json.Unmarshal(raw, &a) != nil || json.Unmarshal([]byte(want), &b) != nil || len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// stopList is "stop": null, a string or a list of strings.
type stopList []string

// UnmarshalJSON accepts a string or an array of strings.
func (s *stopList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return &fieldError{"stop", "stop must be a string or an array of strings"}
	}
	*s = many
	return nil
}

// fieldError is a decoding error that names its field.
type fieldError struct{ param, msg string }

func (e *fieldError) Error() string { return e.msg }

// readBody reads a request body of at most limit bytes that is declared as
// JSON (or not declared). It is not gated (see gate): a client trickling its
// body would hold a slot meant for CPU work.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apiError) {
	if e := checkContentType(r.Header.Get("Content-Type")); e != nil {
		return nil, e
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, newError(http.StatusRequestEntityTooLarge, typeInvalidRequest, "request_too_large",
				fmt.Sprintf("request body is larger than %d bytes (the server's --max-request-bytes)", mbe.Limit))
		}
		return nil, badRequest("", "reading the request body: "+err.Error())
	}
	return body, nil
}

// decodeJSON reads a JSON object into v. Unknown fields are ignored, as
// vLLM ignores them (so clients may send options meant for other servers),
// and returned, to be logged.
func decodeJSON(body []byte, v any) (unknown []string, _ *apiError) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, badRequest("", "the request body is empty; expected a JSON object")
	}
	if body[0] != '{' {
		return nil, badRequest("", "the request body must be a JSON object")
	}
	// JSON is UTF-8 (RFC 8259). encoding/json would quietly turn bad bytes
	// into U+FFFD, so a client's encoding bug would surface as odd model
	// input instead of an error.
	if !utf8.Valid(body) {
		return nil, badRequest("", fmt.Sprintf("the request body is not valid UTF-8 (first bad byte at offset %d)", firstInvalidUTF8(body)))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return nil, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("", "invalid JSON: unexpected data after the top-level object")
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(body, &keys) == nil {
		known := jsonFields(reflect.TypeOf(v))
		for k := range keys {
			if !known[k] {
				unknown = append(unknown, k)
			}
		}
		slices.Sort(unknown)
	}
	return unknown, nil
}

// jsonFields are the JSON names of a struct's fields, embedded structs'
// included.
func jsonFields(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	m := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			maps.Copy(m, jsonFields(f.Type))
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			m[name] = true
		}
	}
	return m
}

// checkContentType accepts a body declared as JSON (application/json or
// any */json or */*+json type) or not declared at all, as FastAPI and so
// vLLM do. Other types are refused: they mean a client bug (curl -d sends
// form encoding), and accepting text/plain or form bodies would let any web
// page make a visitor's browser start generations on a local server
// without a CORS preflight.
func checkContentType(ct string) *apiError {
	if strings.TrimSpace(ct) == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil {
		if _, sub, ok := strings.Cut(mt, "/"); ok && (sub == "json" || strings.HasSuffix(sub, "+json")) {
			return nil
		}
	}
	return newError(http.StatusUnsupportedMediaType, typeInvalidRequest, "unsupported_media_type",
		fmt.Sprintf("Content-Type %q is not JSON; send the body as application/json", ct))
}

// firstInvalidUTF8 is the offset of the first byte of b that is not part
// of a valid UTF-8 sequence.
func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// jsonError turns a decoding error into a 400 that names the field.
func jsonError(err error) *apiError {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
		fe  *fieldError
	)
	switch {
	case errors.As(err, &fe):
		return badRequest(fe.param, fe.msg)
	case errors.As(err, &typ):
		// Fields of the embedded struct are reported under its type name.
		field := strings.TrimPrefix(typ.Field, "samplingFields.")
		if field == "" {
			return badRequest("", fmt.Sprintf("invalid JSON: expected %s, got %s", typ.Type, typ.Value))
		}
		return badRequest(field, fmt.Sprintf("invalid type for %q: expected %s, got %s", field, jsonKind(typ.Type.Kind().String()), typ.Value))
	case errors.As(err, &syn):
		return badRequest("", fmt.Sprintf("invalid JSON at byte %d: %v", syn.Offset, err))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "invalid JSON: unexpected end of input")
	}
	return badRequest("", "invalid JSON: "+err.Error())
}

// jsonKind names a Go kind as JSON calls it.
func jsonKind(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "bool":
		return "a boolean"
	case kind == "string":
		return "a string"
	case kind == "slice", kind == "array":
		return "an array"
	case kind == "map", kind == "struct":
		return "an object"
	}
	return kind
}
