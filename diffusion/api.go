package diffusion

import "time"

// Options control one generation. Zero values take the defaults noted, most
// of which come from the model's dllm.json (Settings.Generation); Sampler
// Defaults returns the ones a zero cannot express (temperature, top-p).
type Options struct {
	// BlockSize is the number of tokens denoised together; 0 = dllm.json's.
	BlockSize int
	// Threshold: every masked position whose top probability is at least
	// this is committed in a step (and always the single most confident
	// one); 0 = dllm.json's. 1.0 commits exactly one token per step.
	Threshold float64
	// MaxStepsPerBlock caps the denoising steps spent on one block; at the
	// last one all remaining positions are committed at once. 0 =
	// dllm.json's max_steps_per_block when BlockSize is dllm.json's, else
	// BlockSize (no cap: every step commits at least one token).
	MaxStepsPerBlock int
	// Temperature 0 (or below 1e-5) is greedy; otherwise candidates are sampled from
	// softmax(logits/T), restricted to the TopP nucleus.
	Temperature float64
	TopP        float64 // 0 or 1 = no nucleus cut
	// Seed makes sampling reproducible; the same seed, prompt and options
	// give the same tokens.
	Seed uint64
	// StopIDs end generation: the first one committed ends it and is
	// dropped along with everything after it. Typically the model's eos ids
	// (EOSIDs).
	StopIDs []int64
	// MaxNewTokens caps the generated tokens (finish reason "length");
	// 0 = as many as the context holds.
	MaxNewTokens int
	// ContextLimit caps prompt plus generated tokens (the KV cache size);
	// 0 = the model's max_position_embeddings. A prompt that leaves no room
	// for one token is ErrContextTooLong.
	ContextLimit int
	// FixedCommit, when positive, replaces the threshold: every step
	// commits exactly this many masked positions (the rest of the block
	// when fewer remain), the most confident ones. With the shift, position
	// 0 always goes in the first step: its prediction is the carry, final
	// before the block's first forward, and leaving it for last would make
	// the forward count depend on the weights. So a block of B positions
	// takes exactly ceil(B/k) denoising forwards (the first also commits the
	// block before it; none when B is 1 with the shift, whose block costs
	// the previous one's commit forward), for speed measurements independent
	// of the weights (dllm
	// bench decode); it is not meant to give good text. MaxStepsPerBlock
	// defaults to B with it (no cap).
	FixedCommit int
	// MaxCommit, when positive, caps the positions a threshold step
	// commits: at most this many of those above the threshold, the most
	// confident first, so that few tokens that must agree with each other
	// (the digits of one number) are decided in the same step. 0 = no cap.
	// MinCommit, when positive, makes every step commit at least this many
	// (the most confident), for speed.
	MaxCommit, MinCommit int
	// ErrorBudget, when positive, replaces the threshold with a dynamic
	// one: a step commits the most confident positions while the sum of
	// their probabilities of being wrong (1 - p) stays within the budget,
	// so a step commits many sure tokens or few doubtful ones (after the
	// entropy-bounded sampler of Ben-Hamu et al., with 1 - p for the
	// entropy).
	ErrorBudget float64
	// Verify checks every drafted block against the model's own
	// left-to-right prediction before any of it is output, and keeps only
	// the prefix that prediction agrees with (docs/sampler.md, "Verify"):
	// the output is then what greedy AR decoding of the model would write,
	// at the speed of the blocks it accepts. Greedy only (Temperature 0),
	// for models with the shift, in threshold mode (not FixedCommit).
	Verify bool
}

// DropDefaultVerify turns off a Verify that came from dllm.json's defaults
// (Sampler.Defaults) when the options sample or commit a fixed count,
// which verify decoding cannot run with: dllm.json's verify is for greedy
// decoding. Callers apply it where the caller did not ask for Verify.
func (o *Options) DropDefaultVerify() {
	if o.Temperature >= minTemperature || o.FixedCommit > 0 {
		o.Verify = false
	}
}

// Block is one committed block handed to the caller as soon as it is final:
// the tokens it adds to the output (after stop handling) in order. The last
// block may be empty when it starts with a stop token.
type Block struct {
	IDs []int64
	// Steps is the forwards spent on this block: its denoising forwards plus
	// the one that wrote the previous block to the KV cache (with the shift,
	// that forward also predicts this block's first token). The Steps of all
	// blocks add up to Result.Steps.
	Steps int
}

// BlockFunc receives each committed block. Returning stop = true ends the
// generation after this block with finish reason "stop" (used for stop
// strings, which need the decoded text); an error aborts it.
type BlockFunc func(b Block) (stop bool, err error)

// Result summarises a finished generation.
type Result struct {
	IDs          []int64 // generated tokens, stop token and what followed removed
	FinishReason string  // "stop" or "length"
	// Steps counts every model forward after the prefill: denoising
	// forwards and the forwards that commit a finished block to the KV
	// cache (one per block followed by another). The prefill's prediction
	// of the first token is free, so N tokens of AR decoding (block size 1
	// with the shift) take N-1 steps.
	Steps int
	// TPF is tokens per forward, len(IDs) / Steps (Steps 0 counts as 1).
	TPF float64
	// Checked and Accepted count, with Verify, the drafted tokens checked
	// against the model's AR prediction and those of them it agreed with
	// (a block's first token, the AR prediction itself, is not counted).
	Checked, Accepted int
	Prefill           time.Duration // time to process the prompt
	Duration          time.Duration // total time, prefill included
}
