package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

const (
	qwenDir = "../testdata/qwen3-tokenizer"
	tinyDir = "../testdata/tiny-llama"
	spDir   = "../testdata/sp-bytefallback"
)

// gunzipQwen returns Qwen3's tokenizer.json, stored gzipped (11 MB raw).
func gunzipQwen(tb testing.TB) []byte {
	tb.Helper()
	f, err := os.Open(filepath.Join(qwenDir, "tokenizer.json.gz"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenErr  error
)

// qwen loads the Qwen3 tokenizer once per test binary: parsing 150k merges
// takes a noticeable fraction of a second.
func qwen(tb testing.TB) *Tokenizer {
	tb.Helper()
	qwenOnce.Do(func() {
		var cfg []byte
		if cfg, qwenErr = os.ReadFile(filepath.Join(qwenDir, TokenizerConfigFile)); qwenErr == nil {
			qwenTok, qwenErr = Parse(gunzipQwen(tb), cfg, "")
		}
	})
	if qwenErr != nil {
		tb.Fatal(qwenErr)
	}
	return qwenTok
}

func load(tb testing.TB, path string) *Tokenizer {
	tb.Helper()
	tok, err := Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// expectations is the shape of expected.json / tokenizer_expected.json.
type expectations struct {
	Encode []struct {
		Text    string `json:"text"`
		IDs     []int  `json:"ids"`
		Decoded string `json:"decoded"`
	} `json:"encode"`
	Chat []struct {
		Messages       json.RawMessage `json:"messages"`
		EnableThinking bool            `json:"enable_thinking"`
		Prompt         string          `json:"prompt"`
		IDs            []int           `json:"ids"`
	} `json:"chat"`
}

func readExpectations(tb testing.TB, path string) expectations {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var e expectations
	if err := json.Unmarshal(data, &e); err != nil {
		tb.Fatal(err)
	}
	return e
}

func equalIDs(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// writeFile is a test shorthand that fails the test on error.
func writeFile(tb testing.TB, path string, data []byte) {
	tb.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}
