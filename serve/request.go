package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Limits on request fields; beyond them a request is a 400.
const (
	maxStops       = 16
	maxStopLen     = 1024
	maxTemperature = 2 // OpenAI's range
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

// decodeBody reads a JSON object into v. Unknown fields are ignored, as
// OpenAI-compatible servers do, so clients may send options dllm lacks.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return newError(http.StatusRequestEntityTooLarge, typeInvalidRequest, "request_too_large",
				fmt.Sprintf("request body is larger than %d bytes", mbe.Limit))
		}
		return badRequest("", "reading the request body: "+err.Error())
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return badRequest("", "the request body is empty; expected a JSON object")
	}
	if body[0] != '{' {
		return badRequest("", "the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("", "invalid JSON: unexpected data after the top-level object")
	}
	return nil
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
