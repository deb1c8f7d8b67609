package serve

import (
	"context"
	"sync"

	"dllm/diffusion"
	"dllm/tokenizer"
)

// Engine generates the continuation of one prompt; *diffusion.Sampler and
// *diffusion.Batcher are engines. The server calls it from up to
// Model.MaxNumSeqs requests at once.
type Engine interface {
	// Generate denoises block after block, handing each committed block to
	// onBlock, until a stop id, onBlock's stop, o.MaxNewTokens or the
	// context limit; it returns ctx.Err() promptly once ctx is done and an
	// error wrapping diffusion.ErrContextTooLong when the prompt does not fit.
	Generate(ctx context.Context, prompt []int64, o diffusion.Options, onBlock diffusion.BlockFunc) (*diffusion.Result, error)
}

// Model is a loaded model: everything a request needs besides its own fields.
type Model struct {
	// Engine runs generations.
	Engine Engine
	// Tokenizer encodes prompts, renders the chat template and decodes output.
	Tokenizer *tokenizer.Tokenizer
	// Defaults are the generation options a request starts from: sampling
	// settings from dllm.json, the stop ids and ContextLimit. Requests
	// override Temperature, TopP, Seed, Threshold and MaxNewTokens.
	Defaults diffusion.Options
	// ContextLength caps prompt plus generated tokens.
	ContextLength int
	// BlockSize is the block size the model was trained for (dllm.json's):
	// a request's block_size may be at most this; 0 lets a request choose
	// none.
	BlockSize int
	// VocabSize is the model's embedding rows; token-id prompts must be below.
	VocabSize int
	// MaxNumSeqs is how many requests the Engine runs at once; 0 means 1.
	MaxNumSeqs int
	// KVCacheBytes is a batching engine's KV cache (MaxNumSeqs slots of
	// ContextLength positions, allocated at load); 0 for the single-stream
	// sampler, whose cache grows as requests need it.
	KVCacheBytes int64
	// BatchStats, for a batching engine, counts its batched forwards and
	// the sequences' forwards they held (/metrics); nil otherwise.
	BatchStats func() diffusion.BatchStats
	// Close frees the model's memory; nil when there is nothing to free.
	Close func()

	dropOnce sync.Once
	drop     map[int]bool // special ids left out of the text
}

// keepToken reports whether id's text belongs in the output: special tokens
// are dropped, as HF's skip_special_tokens does, except the think tags,
// which mark where reasoning ends even when a tokenizer declares them
// special.
func (m *Model) keepToken(id int) bool {
	m.dropOnce.Do(func() {
		m.drop = map[int]bool{}
		for _, a := range m.Tokenizer.AddedTokens() {
			if a.Special && a.Content != thinkOpen && a.Content != thinkClose {
				m.drop[a.ID] = true
			}
		}
	})
	return !m.drop[id]
}
