package diffusion

import (
	"errors"
	"fmt"

	"dllm/model"
)

// ErrContextTooLong is the error, wrapped with the numbers, for a prompt
// that leaves no room to generate within the context limit. A server
// answers it with 400.
var ErrContextTooLong = errors.New("prompt too long")

// ErrInvalidRequest is the error, wrapped with details, for a prompt or
// options the sampler cannot run: an empty prompt, a token outside the
// vocabulary, an option out of range. A server answers it with 400.
var ErrInvalidRequest = errors.New("invalid request")

// prefillChunk bounds the tokens of one prefill forward, and so the
// activation memory a long prompt needs.
const prefillChunk = 2048

// minTemperature is where sampling turns greedy: logits divided by less
// overflow float32 into infinities and NaNs (vLLM draws the line there too).
const minTemperature = 1e-5

// plan is Options resolved against dllm.json and the model, and checked.
type plan struct {
	block       int
	chunk       int // prefill tokens per forward
	threshold   float64
	rule        commitRule // a threshold step's
	fixed       int        // > 0: commit exactly this many positions per step
	verify      bool
	maxSteps    int
	temperature float64
	topP        float64 // < 1: nucleus sampling
	seed        uint64
	stop        map[int64]bool
	maxNew      int   // capped to what the context holds
	cacheLen    int   // KV cache positions to allocate
	mask        int64 // -1: the model has none
	shift       bool
}

// resolve fills o's defaults from st and m and checks o and the prompt.
func resolve(m *model.Model, st *Settings, prompt []int64, o Options) (plan, error) {
	bad := func(format string, args ...any) (plan, error) {
		return plan{}, fmt.Errorf("diffusion: %w: "+format, append([]any{ErrInvalidRequest}, args...)...)
	}
	cfg := m.Config
	// 1. The prompt.
	if len(prompt) == 0 {
		return bad("empty prompt")
	}
	for i, id := range prompt {
		if id < 0 || id >= int64(cfg.VocabSize) {
			return bad("prompt token %d at position %d is outside the vocabulary of %d", id, i, cfg.VocabSize)
		}
	}
	// 2. Ranges (ranges.go; a zero threshold or top_p means dllm.json's).
	ranges := []error{
		CheckTemperature(o.Temperature), CheckErrorBudget(o.ErrorBudget),
		CheckCommitCount("tokens_per_step", int64(o.FixedCommit), 0), CheckCommitCount("max_commit", int64(o.MaxCommit), 0),
		CheckCommitCount("min_commit", int64(o.MinCommit), 0), CheckCommitBounds(int64(o.MinCommit), int64(o.MaxCommit)),
	}
	if o.Threshold != 0 {
		ranges = append(ranges, CheckThreshold(o.Threshold))
	}
	if o.TopP != 0 {
		ranges = append(ranges, CheckTopP(o.TopP))
	}
	for _, err := range ranges {
		if err != nil {
			return bad("%v", err)
		}
	}
	switch {
	case o.BlockSize < 0:
		return bad("block size %d is negative", o.BlockSize)
	case o.MaxStepsPerBlock < 0:
		return bad("max steps per block %d is negative", o.MaxStepsPerBlock)
	case o.MaxNewTokens < 0:
		return bad("max new tokens %d is negative", o.MaxNewTokens)
	case o.ContextLimit < 0:
		return bad("context limit %d is negative", o.ContextLimit)
	case o.Verify && o.FixedCommit > 0:
		return bad("verify decoding commits by threshold, not a fixed count")
	case o.Verify && o.Temperature >= minTemperature:
		return bad("verify decoding is greedy: temperature must be 0, not %v", o.Temperature)
	case o.Verify && !st.Shift:
		return bad("verify decoding needs a model with the shift (its logits predict the next position)")
	}
	// 3. Defaults.
	p := plan{
		block: o.BlockSize, chunk: prefillChunk, threshold: o.Threshold, fixed: o.FixedCommit,
		verify: o.Verify, maxSteps: o.MaxStepsPerBlock,
		temperature: o.Temperature, topP: o.TopP, seed: o.Seed,
		stop: map[int64]bool{}, mask: int64(st.MaskTokenID), shift: st.Shift,
	}
	if p.block == 0 {
		p.block = st.BlockSize
	}
	if p.threshold == 0 {
		p.threshold = st.Generation.Threshold
	}
	p.rule = commitRule{threshold: p.threshold, budget: o.ErrorBudget, min: o.MinCommit, max: o.MaxCommit}
	if p.maxSteps == 0 {
		p.maxSteps = p.block
		// dllm.json's cap would cut a fixed-count block short.
		if p.block == st.BlockSize && st.Generation.MaxStepsPerBlock > 0 && p.fixed == 0 {
			p.maxSteps = st.Generation.MaxStepsPerBlock
		}
	}
	if p.temperature < minTemperature {
		p.temperature = 0
	}
	if p.topP == 0 {
		p.topP = 1
	}
	for _, id := range o.StopIDs {
		p.stop[id] = true
	}
	if p.mask < 0 && !(p.block == 1 && p.shift) {
		return bad("the model has no mask token, so only block size 1 (AR decoding) is possible, not %d", p.block)
	}
	// 4. Room in the context.
	limit := o.ContextLimit
	if limit == 0 {
		limit = cfg.MaxPositionEmbeddings
	}
	room := limit - len(prompt)
	if room < 1 {
		return plan{}, fmt.Errorf("diffusion: %w: %d prompt tokens leave no room to generate within the context limit of %d", ErrContextTooLong, len(prompt), limit)
	}
	p.maxNew = room
	if o.MaxNewTokens > 0 {
		p.maxNew = min(o.MaxNewTokens, room)
	}
	// Whole blocks when they fit; the last block is cut short otherwise.
	extra := p.maxNew
	if r := p.maxNew % p.block; r != 0 {
		extra += min(p.block-r, room-p.maxNew)
	}
	p.cacheLen = len(prompt) + extra
	return p, nil
}
