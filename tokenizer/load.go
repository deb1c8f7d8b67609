package tokenizer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Checkpoint file names, as transformers writes them.
const (
	TokenizerFile       = "tokenizer.json"
	TokenizerConfigFile = "tokenizer_config.json"
	ChatTemplateFile    = "chat_template.jinja"
)

// Load reads a tokenizer from a checkpoint directory (tokenizer.json, and
// tokenizer_config.json and chat_template.jinja when present; the .jinja
// file wins over the config's chat_template, as in transformers) or from
// the path of a single tokenizer.json.
func Load(path string) (*Tokenizer, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if !info.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		return Parse(data, nil, "")
	}
	data, err := os.ReadFile(filepath.Join(path, TokenizerFile))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfg, err := readOptional(filepath.Join(path, TokenizerConfigFile))
	if err != nil {
		return nil, err
	}
	tpl, err := readOptional(filepath.Join(path, ChatTemplateFile))
	if err != nil {
		return nil, err
	}
	return Parse(data, cfg, string(tpl))
}

func readOptional(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return data, nil
}
