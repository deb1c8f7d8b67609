package diffusion

import (
	"slices"

	"dllm/model"
	"dllm/tokenizer"
)

// EOSIDs lists a model's end-of-sequence ids, the usual StopIDs: config.json's
// eos_token_id (one id or a list) and tokenizer_config.json's eos_token,
// each once. tok may be nil.
func EOSIDs(cfg *model.Config, tok *tokenizer.Tokenizer) []int64 {
	var ids []int64
	add := func(id int) {
		if !slices.Contains(ids, int64(id)) {
			ids = append(ids, int64(id))
		}
	}
	for _, id := range cfg.EOSTokenIDs {
		add(id)
	}
	if tok != nil {
		if id, ok := tok.EOS(); ok {
			add(id)
		}
	}
	return ids
}
