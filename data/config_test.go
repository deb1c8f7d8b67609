package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDataLoadConfig(t *testing.T) {
	cases := []struct {
		name  string
		yaml  string
		want  string // error substring; "" for success
		check func(t *testing.T, c Config)
	}{
		{name: "defaults", yaml: "tokenizer: tok\nout: o\nsources:\n  - {kind: text, paths: [a.jsonl]}\n", check: func(t *testing.T, c Config) {
			s := c.Sources[0]
			if c.SeqLen != DefaultSeqLen || c.ShardTokens != DefaultShardTokens || !c.Chat.SplitTurns || s.Weight != 1 || s.Field != "text" || s.Name != "source0" || s.Format != FormatAuto {
				t.Errorf("defaults not applied: %+v", c)
			}
		}},
		{name: "chat field default", yaml: "tokenizer: tok\nout: o\nsources:\n  - {kind: chat, paths: [a.jsonl], weight: 2.5}\n", check: func(t *testing.T, c Config) {
			if c.Sources[0].Field != "messages" || c.Sources[0].Weight != 2.5 {
				t.Errorf("%+v", c.Sources[0])
			}
		}},
		{name: "thinking", yaml: "tokenizer: t\nout: o\nchat: {enable_thinking: false}\nsources: [{kind: chat, paths: [a]}]\n", check: func(t *testing.T, c Config) {
			if c.Chat.EnableThinking == nil || *c.Chat.EnableThinking {
				t.Error("enable_thinking not read")
			}
		}},
		{name: "unknown top-level key", yaml: "tokenizer: t\nseqlen: 5\n", want: "field seqlen not found"},
		{name: "unknown source key", yaml: "sources:\n  - {kind: text, paths: [a], wieght: 2}\n", want: "field wieght not found"},
		{name: "explicit zero weight", yaml: "tokenizer: t\nout: o\nsources:\n  - {name: x, kind: text, paths: [a], weight: 0}\n", want: `source "x": weight 0: must be > 0`},
		{name: "bad kind", yaml: "tokenizer: t\nout: o\nsources: [{kind: code, paths: [a]}]\n", want: `kind "code"`},
		{name: "bad format", yaml: "tokenizer: t\nout: o\nsources: [{kind: text, format: csv, paths: [a]}]\n", want: `format "csv"`},
		{name: "no sources", yaml: "tokenizer: t\nout: o\n", want: "at least one source"},
		{name: "no tokenizer", yaml: "out: o\nsources: [{kind: text, paths: [a]}]\n", want: "tokenizer: a model or tokenizer directory is required"},
		{name: "seq_len", yaml: "tokenizer: t\nout: o\nseq_len: 1\nsources: [{kind: text, paths: [a]}]\n", want: "seq_len 1"},
		{name: "endless repeat", yaml: "tokenizer: t\nout: o\nsources: [{name: r, kind: text, paths: [a], repeat: true}]\n", want: `source "r": repeat needs max_tokens`},
		{name: "duplicate names", yaml: "tokenizer: t\nout: o\nsources: [{name: a, kind: text, paths: [a]}, {name: a, kind: text, paths: [b]}]\n", want: "duplicate name"},
		{name: "not yaml", yaml: "sources: [", want: "yaml"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			writeFile(t, path, []byte(c.yaml))
			cfg := DefaultConfig()
			err := cfg.LoadConfig(path)
			if err == nil {
				err = cfg.Validate()
			}
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				c.check(t, cfg)
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// TestExampleConfig keeps configs/data/example.yaml loadable and its
// inputs present.
func TestDataExampleConfig(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.LoadConfig("../configs/data/example.yaml"); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if err := os.Chdir(".."); err != nil { // paths in the example are relative to the repository root
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	for _, s := range cfg.Sources {
		if _, err := expandPaths(s); err != nil {
			t.Error(err)
		}
	}
}

// TestDataProxyConfigs: the proxy's data configs load and validate.
func TestDataProxyConfigs(t *testing.T) {
	files, _ := filepath.Glob("../configs/proxy/data*.yaml")
	more, _ := filepath.Glob("../configs/proxy/*/data*.yaml")
	files = append(files, more...)
	if len(files) < 3 {
		t.Fatalf("proxy data configs: %v", files)
	}
	for _, f := range files {
		cfg := DefaultConfig()
		if err := cfg.LoadConfig(f); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}
