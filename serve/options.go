package serve

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/http"
	"strings"

	"dllm/diffusion"
)

// genParams is a validated generation request, independent of endpoint.
type genParams struct {
	prompt []int64
	opts   diffusion.Options
	stops  []string
}

// checkFields checks what a request asks for beyond its sampling options:
// the model (another name is a 404, as vLLM answers), the fields dllm does
// not implement (a 400), and the unknown fields, which are ignored with a
// warning in the log.
func (s *Server) checkFields(f *samplingFields, unknown []string) *apiError {
	if f.Model != "" && f.Model != s.cfg.ModelName {
		return newError(http.StatusNotFound, typeNotFound, "model_not_found",
			fmt.Sprintf("the model %q does not exist; this server has %q", f.Model, s.cfg.ModelName))
	}
	if e := f.unsupported(); e != nil {
		return e
	}
	if len(unknown) > 0 {
		s.log.Warn("ignoring unknown request fields", "fields", strings.Join(unknown, ", "))
	}
	return nil
}

// options checks the shared sampling fields and fills o (which holds the
// model's defaults) for a prompt of promptLen tokens. defaultMax is the
// endpoint's max_tokens when the request gives none.
func (f *samplingFields) options(m *Model, promptLen, defaultMax int) (diffusion.Options, []string, *apiError) {
	o := m.Defaults
	if f.N != nil && *f.N != 1 {
		return o, nil, badRequest("n", fmt.Sprintf("n must be 1 (dllm returns one choice per request), got %d", *f.N))
	}
	if isTruthy(f.Logprobs) {
		return o, nil, badRequest("logprobs", "logprobs are not supported")
	}
	if t := f.Temperature; t != nil {
		if err := diffusion.CheckTemperature(*t); err != nil {
			return o, nil, badRequest("temperature", err.Error())
		}
		o.Temperature = *t
	}
	if p := f.TopP; p != nil {
		if err := diffusion.CheckTopP(*p); err != nil {
			return o, nil, badRequest("top_p", err.Error())
		}
		o.TopP = *p
	}
	if th := f.Threshold; th != nil {
		if err := diffusion.CheckThreshold(*th); err != nil {
			return o, nil, badRequest("threshold", err.Error())
		}
		o.Threshold = *th
	}
	if b := f.BlockSize; b != nil {
		if m.BlockSize < 1 || *b < 1 || *b > int64(m.BlockSize) {
			return o, nil, badRequest("block_size", fmt.Sprintf("block_size must be between 1 and %d (the block size the model was trained for), got %d", m.BlockSize, *b))
		}
		o.BlockSize = int(*b)
	}
	if k := f.TokensPerStep; k != nil {
		if err := diffusion.CheckCommitCount("tokens_per_step", *k, 1); err != nil {
			return o, nil, badRequest("tokens_per_step", err.Error())
		}
		o.FixedCommit = int(*k)
	}
	if k := f.MaxCommit; k != nil {
		if err := diffusion.CheckCommitCount("max_commit", *k, 0); err != nil {
			return o, nil, badRequest("max_commit", err.Error())
		}
		o.MaxCommit = int(*k)
	}
	if k := f.MinCommit; k != nil {
		if err := diffusion.CheckCommitCount("min_commit", *k, 0); err != nil {
			return o, nil, badRequest("min_commit", err.Error())
		}
		o.MinCommit = int(*k)
	}
	if err := diffusion.CheckCommitBounds(int64(o.MinCommit), int64(o.MaxCommit)); err != nil {
		return o, nil, badRequest("min_commit", err.Error())
	}
	if b := f.ErrorBudget; b != nil {
		if err := diffusion.CheckErrorBudget(*b); err != nil {
			return o, nil, badRequest("error_budget", err.Error())
		}
		o.ErrorBudget = *b
	}
	if v := f.Verify; v != nil {
		o.Verify = *v
	} else {
		o.DropDefaultVerify()
	}
	if o.Verify && o.Temperature > 0 {
		return o, nil, badRequest("verify", fmt.Sprintf("verify decoding is greedy: temperature must be 0, got %v", o.Temperature))
	}
	if o.Verify && o.FixedCommit > 0 {
		return o, nil, badRequest("verify", "verify and tokens_per_step cannot be combined")
	}
	if f.IgnoreEOS {
		o.StopIDs = nil
	}
	if f.Seed != nil {
		o.Seed = uint64(*f.Seed)
	} else {
		o.Seed = randomSeed()
	}

	// Reasoning counts toward the limit; the newer name wins, as in OpenAI's API.
	param, limit := "max_tokens", f.MaxTokens
	if f.MaxCompletionTokens != nil {
		param, limit = "max_completion_tokens", f.MaxCompletionTokens
	}
	room := m.ContextLength - promptLen
	if room < 1 {
		return o, nil, contextError(m.ContextLength, promptLen)
	}
	maxNew := min(defaultMax, room)
	if limit != nil {
		if *limit < 1 {
			return o, nil, badRequest(param, fmt.Sprintf("%s must be at least 1, got %d", param, *limit))
		}
		// More than fits is clamped, not refused: clients ask for generous
		// limits and the context bounds them anyway (finish_reason "length").
		maxNew = int(min(*limit, int64(room)))
	}
	o.MaxNewTokens = maxNew
	o.ContextLimit = m.ContextLength

	if len(f.Stop) > maxStops {
		return o, nil, badRequest("stop", fmt.Sprintf("at most %d stop strings are allowed, got %d", maxStops, len(f.Stop)))
	}
	for _, s := range f.Stop {
		if s == "" || len(s) > maxStopLen {
			return o, nil, badRequest("stop", fmt.Sprintf("stop strings must be 1 to %d bytes long", maxStopLen))
		}
	}
	return o, f.Stop, nil
}

// contextError is the 400 for a prompt that leaves no room to generate.
func contextError(ctxLen, promptLen int) *apiError {
	e := badRequest("messages", fmt.Sprintf("this model's maximum context length is %d tokens, but the prompt has %d tokens (at least one must be left to generate)", ctxLen, promptLen))
	e.Code = strPtr("context_length_exceeded")
	return e
}

// isTruthy reports whether a raw JSON value asks for something: true or a
// positive number.
func isTruthy(raw []byte) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != "false" && s != "0"
}

// randomSeed gives requests without a seed different samples.
func randomSeed() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
