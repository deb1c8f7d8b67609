package diffusion

import "time"

// Options control one generation. Zero values take the defaults noted, most
// of which come from the model's dllm.json (Settings.Generation).
type Options struct {
	// BlockSize is the number of tokens denoised together; 0 = dllm.json's.
	BlockSize int
	// Threshold: every masked position whose top probability is at least
	// this is committed in a step (and always the single most confident
	// one); 0 = dllm.json's. 1.0 commits exactly one token per step.
	Threshold float64
	// MaxStepsPerBlock caps the forwards spent on one block; when reached,
	// all remaining positions are committed at once. 0 = BlockSize.
	MaxStepsPerBlock int
	// Temperature 0 is greedy; otherwise candidates are sampled from
	// softmax(logits/T), restricted to the TopP nucleus.
	Temperature float64
	TopP        float64 // 0 or 1 = no nucleus cut
	// Seed makes sampling reproducible; the same seed, prompt and options
	// give the same tokens.
	Seed uint64
	// StopIDs end generation: the first one committed ends it and is
	// dropped along with everything after it. Typically the model's eos ids.
	StopIDs []int64
	// MaxNewTokens caps the generated tokens (finish reason "length").
	MaxNewTokens int
	// ContextLimit caps prompt plus generated tokens (the KV cache size);
	// 0 = the model's max_position_embeddings.
	ContextLimit int
}

// Block is one committed block handed to the caller as soon as it is final:
// the tokens it adds to the output (after stop handling) in order.
type Block struct {
	IDs   []int64
	Steps int // forwards spent on this block
}

// BlockFunc receives each committed block. Returning stop = true ends the
// generation after this block with finish reason "stop" (used for stop
// strings, which need the decoded text); an error aborts it.
type BlockFunc func(b Block) (stop bool, err error)

// Result summarises a finished generation.
type Result struct {
	IDs          []int64       // generated tokens, stop token and what followed removed
	FinishReason string        // "stop" or "length"
	Steps        int           // model forwards spent on generation (prefill excluded)
	TPF          float64       // tokens per forward: len(IDs) / Steps
	Prefill      time.Duration // time to process the prompt
	Duration     time.Duration // total time, prefill included
}
