package data

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Source kinds.
const (
	// KindText is plain text for pretraining: every token is a target.
	KindText = "text"
	// KindChat is an OpenAI-style message list rendered with the model's
	// chat template: only assistant tokens are targets.
	KindChat = "chat"
)

// Source file formats.
const (
	FormatAuto    = "auto"
	FormatParquet = "parquet"
	FormatArrow   = "arrow" // Arrow IPC, file or stream format
	FormatJSONL   = "jsonl"
)

// Config is everything `dllm data prepare` needs. Start from
// DefaultConfig, then LoadConfig's file, then flags; Validate at the end.
// The json tags are the manifest's echo of the config: fields that do not
// change the output (Out, Workers) are left out of it.
type Config struct {
	// Tokenizer is the model (or tokenizer) directory whose tokenizer.json
	// and chat template are used. Required.
	Tokenizer string `yaml:"tokenizer" json:"tokenizer"`
	// Out is the directory receiving the shards and manifest.json. Required.
	Out string `yaml:"out" json:"-"`
	// SeqLen is the length of every packed sequence. Default 4096.
	SeqLen int `yaml:"seq_len" json:"seq_len"`
	// Seed drives file-order and buffer shuffling. Default 0.
	Seed uint64 `yaml:"seed" json:"seed"`
	// Workers is the number of tokenizing goroutines; 0 (default) means one
	// per CPU. It does not change the output.
	Workers int `yaml:"workers" json:"-"`
	// ShardTokens is the number of tokens per shard, rounded down to whole
	// sequences (at least one). Default 2^26 (256 MiB of tokens).
	ShardTokens int64 `yaml:"shard_tokens" json:"shard_tokens"`
	// TotalTokens stops the run after this many output tokens, rounded
	// down to whole sequences; 0 (default) runs until the sources are
	// exhausted.
	TotalTokens int64 `yaml:"total_tokens" json:"total_tokens"`
	// Separator is the token appended to every document (the end of a
	// document; packing never pads with it). Default "": the tokenizer's
	// eos_token.
	Separator string `yaml:"separator" json:"separator"`
	// Chat controls how chat sources are rendered and masked.
	Chat ChatConfig `yaml:"chat" json:"chat"`
	// Sources are mixed by token share (see SourceConfig.Weight).
	Sources []SourceConfig `yaml:"sources" json:"sources"`
}

// ChatConfig controls chat rendering.
type ChatConfig struct {
	// EnableThinking sets the template's enable_thinking; nil (default)
	// leaves the template's own default.
	EnableThinking *bool `yaml:"enable_thinking" json:"enable_thinking"`
	// EndOfTurn is the token text that closes an assistant turn; it is the
	// last loss-ON token of the turn. Default "": <|im_end|> when the
	// vocabulary has it, else the eos_token.
	EndOfTurn string `yaml:"end_of_turn" json:"end_of_turn"`
	// SplitTurns handles templates that render an assistant turn
	// differently once later turns follow (Qwen3 drops the reasoning of
	// earlier turns): each such turn becomes its own document, rendered as
	// the last turn, so that it is trained exactly as it is generated.
	// When false, such turns stay in the conversation as loss-OFF context.
	// Default true.
	SplitTurns bool `yaml:"split_turns" json:"split_turns"`
}

// SourceConfig is one corpus.
type SourceConfig struct {
	// Name identifies the source in logs and the manifest. Default
	// "source<i>".
	Name string `yaml:"name" json:"name"`
	// Kind is KindText or KindChat. Required.
	Kind string `yaml:"kind" json:"kind"`
	// Paths are files, directories (their files of a known format) or glob
	// patterns, relative to the working directory. Matches are sorted.
	Paths []string `yaml:"paths" json:"paths"`
	// Format is auto (default: by extension: .parquet, .arrow/.feather/
	// .ipc, .jsonl/.json/.jsonl.gz), parquet, arrow or jsonl.
	Format string `yaml:"format" json:"format"`
	// Field is the column or JSON key read. Default "text" for text
	// sources, "messages" for chat sources.
	Field string `yaml:"field" json:"field"`
	// Weight is the source's target share of output tokens, relative to
	// the other sources' weights. Must be > 0; default 1.
	Weight float64 `yaml:"weight" json:"weight"`
	// MaxTokens caps the tokens taken from the source (whole documents);
	// 0 (default) means no cap.
	MaxTokens int64 `yaml:"max_tokens" json:"max_tokens"`
	// Repeat restarts the source from its beginning when it runs out
	// (upsampling); it then needs MaxTokens or the run's TotalTokens.
	Repeat bool `yaml:"repeat" json:"repeat"`
	// ShuffleFiles shuffles the file order (per epoch, from Seed).
	ShuffleFiles bool `yaml:"shuffle_files" json:"shuffle_files"`
	// ShuffleBuffer shuffles records through a buffer of this many (from
	// Seed); 0 (default) keeps file order.
	ShuffleBuffer int `yaml:"shuffle_buffer" json:"shuffle_buffer"`
	// MaxDocTokens skips documents longer than this (separator included);
	// 0 (default) keeps all, splitting long ones across sequences.
	MaxDocTokens int `yaml:"max_doc_tokens" json:"max_doc_tokens"`
	// MaxLineBytes bounds a JSONL line. Default 64 MiB.
	MaxLineBytes int `yaml:"max_line_bytes" json:"-"`
}

// Defaults.
const (
	DefaultSeqLen       = 4096
	DefaultShardTokens  = 1 << 26
	DefaultMaxLineBytes = 64 << 20
)

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{SeqLen: DefaultSeqLen, ShardTokens: DefaultShardTokens, Chat: ChatConfig{SplitTurns: true}}
}

// LoadConfig reads a YAML config over c. Unknown keys are errors, so a
// misspelt key cannot silently leave a default in place.
func (c *Config) LoadConfig(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("data: config: %w", err)
	}
	if err := c.parseYAML(data); err != nil {
		return fmt.Errorf("data: config %s: %w", path, err)
	}
	return nil
}

func (c *Config) parseYAML(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) { // EOF: empty file
		return err
	}
	// A weight left out defaults to 1, but an explicit 0 is a mistake to
	// report, which the typed decode above cannot tell apart.
	var weights struct {
		Sources []struct {
			Weight *float64 `yaml:"weight"`
		} `yaml:"sources"`
	}
	if err := yaml.Unmarshal(data, &weights); err != nil {
		return err
	}
	for i, s := range weights.Sources {
		if s.Weight != nil && *s.Weight <= 0 && i < len(c.Sources) {
			return fmt.Errorf("source %q: weight %v: must be > 0", c.Sources[i].Name, *s.Weight)
		}
	}
	return nil
}

// Validate fills per-source defaults and checks the config.
func (c *Config) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.Tokenizer == "" {
		bad("tokenizer: a model or tokenizer directory is required (--tokenizer)")
	}
	if c.Out == "" {
		bad("out: an output directory is required (--out)")
	}
	if c.SeqLen < 2 || c.SeqLen > maxSeqLen {
		bad("seq_len %d: want 2 to %d", c.SeqLen, maxSeqLen)
	}
	if c.Workers < 0 {
		bad("workers %d: want 0 (all CPUs) or more", c.Workers)
	}
	if c.ShardTokens <= 0 || c.ShardTokens > maxShardTokens {
		bad("shard_tokens %d: want 1 to %d", c.ShardTokens, int64(maxShardTokens))
	}
	if c.TotalTokens < 0 || (c.TotalTokens > 0 && c.TotalTokens < int64(c.SeqLen)) {
		bad("total_tokens %d: want 0 (until the sources run out) or at least seq_len (%d)", c.TotalTokens, c.SeqLen)
	}
	if len(c.Sources) == 0 {
		bad("sources: at least one source is required")
	}
	names := map[string]bool{}
	for i := range c.Sources {
		s := &c.Sources[i]
		if s.Name == "" {
			s.Name = fmt.Sprintf("source%d", i)
		}
		if names[s.Name] {
			bad("source %q: duplicate name", s.Name)
		}
		names[s.Name] = true
		switch s.Kind {
		case KindText:
			if s.Field == "" {
				s.Field = "text"
			}
		case KindChat:
			if s.Field == "" {
				s.Field = "messages"
			}
		default:
			bad("source %q: kind %q: want %s or %s", s.Name, s.Kind, KindText, KindChat)
		}
		if s.Format == "" {
			s.Format = FormatAuto
		}
		switch s.Format {
		case FormatAuto, FormatParquet, FormatArrow, FormatJSONL:
		default:
			bad("source %q: format %q: want auto, parquet, arrow or jsonl", s.Name, s.Format)
		}
		if len(s.Paths) == 0 {
			bad("source %q: paths: at least one file or pattern is required", s.Name)
		}
		if s.Weight == 0 {
			s.Weight = 1
		}
		if s.Weight < 0 || s.Weight != s.Weight {
			bad("source %q: weight %v: must be > 0", s.Name, s.Weight)
		}
		if s.MaxTokens < 0 || s.ShuffleBuffer < 0 || s.MaxDocTokens < 0 || s.MaxLineBytes < 0 {
			bad("source %q: max_tokens, shuffle_buffer, max_doc_tokens and max_line_bytes must not be negative", s.Name)
		}
		if s.MaxLineBytes == 0 {
			s.MaxLineBytes = DefaultMaxLineBytes
		}
		if s.Repeat && s.MaxTokens == 0 && c.TotalTokens == 0 {
			bad("source %q: repeat needs max_tokens on the source or total_tokens on the run, or it never ends", s.Name)
		}
	}
	errs = append(errs, c.evalGuardErrors()...) // guard.go: never train on evaluation sets
	if len(errs) > 0 {
		return fmt.Errorf("data: config: %s", strings.Join(errs, "; "))
	}
	return nil
}
