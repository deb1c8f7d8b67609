package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

const tinyModel = "../../testdata/tiny-llama"

// runTokenize runs `dllm tokenize args...` and returns its standard output.
func runTokenize(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.Command{
		Name:      "dllm",
		Writer:    &out,
		ErrWriter: &errOut,
		Commands:  []*cli.Command{tokenizeCommand()},
	}
	err := app.Run(context.Background(), append([]string{"dllm", "tokenize"}, args...))
	return out.String(), err
}

func TestTokenizeCommand(t *testing.T) {
	chat := filepath.Join(t.TempDir(), "chat.json")
	if err := os.WriteFile(chat, []byte(`[{"role": "user", "content": "What is 2+2?"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	const (
		// From testdata/tiny-llama/tokenizer_expected.json.
		helloIDs = "44,73,80,339,16,322,272,80,72,5"
		chatIDs  = "2,89,495,203,59,76,277,318,225,22,15,22,35,1,203,2,69,326,77,278,69,316,203"
		noThink  = chatIDs + ",3,203,203,4,203,203"
	)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"text", []string{"--model", tinyModel, "Hello, world!"}, strings.ReplaceAll(helloIDs, ",", " ") + "\n"},
		{"text json", []string{"--model", tinyModel, "--json", "Hello, world!"}, `{"ids":[` + helloIDs + "]}\n"},
		{"empty text", []string{"--model", tinyModel, "--json", ""}, `{"ids":[]}` + "\n"},
		{"tokenizer.json path", []string{"--model", tinyModel + "/tokenizer.json", "--json", "Hello, world!"}, `{"ids":[` + helloIDs + "]}\n"},
		{"chat json", []string{"--model", tinyModel, "--json", "--chat", chat},
			`{"prompt":"<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n","ids":[` + chatIDs + "]}\n"},
		{"chat no thinking", []string{"--model", tinyModel, "--json", "--chat", chat, "--enable-thinking=false"},
			`{"prompt":"<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n","ids":[` + noThink + "]}\n"},
		{"chat text", []string{"--model", tinyModel, "--chat", chat},
			"<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n" + strings.ReplaceAll(chatIDs, ",", " ") + "\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := runTokenize(t, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("output %q, want %q", got, c.want)
			}
		})
	}
}

func TestTokenizeCommandErrors(t *testing.T) {
	dir := t.TempDir()
	badChat := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badChat, []byte(`{"role": "user"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no model flag", []string{"hi"}, "model"},
		{"missing model dir", []string{"--model", filepath.Join(dir, "nope"), "hi"}, "no such file"},
		{"dir without tokenizer", []string{"--model", dir, "hi"}, "tokenizer.json"},
		{"no text", []string{"--model", tinyModel}, "one TEXT"},
		{"two texts", []string{"--model", tinyModel, "a", "b"}, "one TEXT"},
		{"text and chat", []string{"--model", tinyModel, "--chat", badChat, "a"}, "not both"},
		{"missing chat file", []string{"--model", tinyModel, "--chat", filepath.Join(dir, "none.json")}, "none.json"},
		{"chat not a list", []string{"--model", tinyModel, "--chat", badChat}, "want a JSON array"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runTokenize(t, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
}
