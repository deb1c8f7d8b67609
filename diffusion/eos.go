package diffusion

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"dllm/model"
	"dllm/tokenizer"
)

// EOSIDs lists a model's end-of-sequence ids, the StopIDs of every
// generation (serve, generate, train's samples), each once: config.json's
// eos_token_id (one id or a list), tokenizer_config.json's eos_token (tok
// may be nil), and dir/generation_config.json's eos_token_id, which HF's
// generate() stops on (a missing file has none; dir "" skips it).
func EOSIDs(dir string, cfg *model.Config, tok *tokenizer.Tokenizer) ([]int64, error) {
	var ids []int64
	add := func(id int) {
		if id >= 0 && !slices.Contains(ids, int64(id)) {
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
	if dir != "" {
		gen, err := generationEOS(dir)
		if err != nil {
			return nil, err
		}
		for _, id := range gen {
			add(id)
		}
	}
	return ids, nil
}

// generationEOS reads generation_config.json's eos_token_id (an id or a
// list); a missing file means none.
func generationEOS(dir string) ([]int, error) {
	path := filepath.Join(dir, "generation_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var g struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(g.EOS) == 0 || string(g.EOS) == "null" {
		return nil, nil
	}
	var one int
	if json.Unmarshal(g.EOS, &one) == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(g.EOS, &many); err != nil {
		return nil, fmt.Errorf("%s: eos_token_id must be an id or a list of ids", path)
	}
	return many, nil
}
