package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"dllm/diffusion"
	"dllm/torch"
)

// runGenerateCmd runs `dllm generate args...` and returns stdout and stderr.
func runGenerateCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.Command{Name: "dllm", Writer: &out, ErrWriter: &errOut, Commands: []*cli.Command{generateCommand()}}
	err := app.Run(context.Background(), append([]string{"dllm", "generate", "--device", "cpu"}, args...))
	return out.String(), errOut.String(), err
}

// convertedTiny is testdata/tiny-llama copied with a dllm.json (mask 500,
// an unused padding row; block size 4), as dllm convert would leave it.
func convertedTiny(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(tinyModel, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := diffusion.NewSettings(500, diffusion.DefaultMaskToken, 4, true).Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

type generateOutput struct {
	IDs          []int64 `json:"ids"`
	Text         string  `json:"text"`
	Steps        int     `json:"steps"`
	TPF          float64 `json:"tpf"`
	FinishReason string  `json:"finish_reason"`
	PromptTokens int     `json:"prompt_tokens"`
}

func TestGenerateCommand(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Fatal(err)
	}
	torch.SetNumThreads(1) // a tiny model on a CPU shared with other tests
	b, err := os.ReadFile(tinyModel + "/tokenizer_expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var expected struct {
		Chat []struct {
			Messages json.RawMessage `json:"messages"`
			IDs      []int64         `json:"ids"`
			Greedy16 []int64         `json:"greedy16"`
		} `json:"chat"`
	}
	if err := json.Unmarshal(b, &expected); err != nil {
		t.Fatal(err)
	}
	chat0, chat1 := expected.Chat[0], expected.Chat[1]
	dir := convertedTiny(t)
	chatFile := filepath.Join(t.TempDir(), "chat.json")
	if err := os.WriteFile(chatFile, chat0.Messages, 0o644); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(chat1.IDs))
	for i, id := range chat1.IDs {
		ids[i] = strconv.FormatInt(id, 10)
	}
	// Block size 1 (and the AR baseline) reproduce transformers' greedy
	// generate.
	cases := []struct {
		name   string
		args   []string
		prompt []int64
		want   []int64
	}{
		{"chat, block size 1", []string{"--model", dir, "--chat", chatFile, "--enable-thinking=true", "--block-size", "1"}, chat0.IDs, chat0.Greedy16},
		{"ids, AR baseline", []string{"--model", tinyModel, "--ar", "--ids", strings.Join(ids, ",")}, chat1.IDs, chat1.Greedy16},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := runGenerateCmd(t, append(c.args, "--ignore-eos", "--max-tokens", "16", "--json")...)
			if err != nil {
				t.Fatal(err)
			}
			var got generateOutput
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if !slices.Equal(got.IDs, c.want) || got.FinishReason != "length" || got.PromptTokens != len(c.prompt) || got.Steps != 15 {
				t.Errorf("got %+v\nwant ids %v, finish length, %d prompt tokens, 15 steps", got, c.want, len(c.prompt))
			}
		})
	}
	// Blocks of 4 with dllm.json's verify: still greedy decoding, in fewer
	// steps where drafts stand; sampling turns the default off, and asking
	// for verify with it is refused.
	out, _, err := runGenerateCmd(t, "--model", dir, "--chat", chatFile, "--enable-thinking=true", "--ignore-eos", "--max-tokens", "16", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var verified generateOutput
	if err := json.Unmarshal([]byte(out), &verified); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !slices.Equal(verified.IDs, chat0.Greedy16) {
		t.Errorf("verify: ids %v, want %v", verified.IDs, chat0.Greedy16)
	}
	if _, _, err := runGenerateCmd(t, "--model", dir, "--prompt", "Hi", "--max-tokens", "4", "--temperature", "0.7"); err != nil {
		t.Errorf("sampling with dllm.json's verify: %v", err)
	}
	if _, _, err := runGenerateCmd(t, "--model", dir, "--prompt", "Hi", "--max-tokens", "4", "--temperature", "0.7", "--verify"); err == nil || !strings.Contains(err.Error(), "greedy") {
		t.Errorf("--verify with sampling: %v, want a greedy-only error", err)
	}
	// Streamed text is the decoded ids; the stats go to stderr.
	args := []string{"--model", dir, "--prompt", "Hello, world", "--max-tokens", "12"}
	out, _, err = runGenerateCmd(t, append(args, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var whole generateOutput
	if err := json.Unmarshal([]byte(out), &whole); err != nil {
		t.Fatal(err)
	}
	text, stats, err := runGenerateCmd(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if text != whole.Text+"\n" || !strings.Contains(stats, strconv.Itoa(len(whole.IDs))+" tokens") {
		t.Errorf("streamed %q, JSON text %q; stats %q", text, whole.Text, stats)
	}
}

func TestGenerateCommandErrors(t *testing.T) {
	dir := convertedTiny(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"not converted", []string{"--model", tinyModel, "--ids", "1,2"}, "not a diffusion model directory"},
		{"no prompt", []string{"--model", dir}, "exactly one of"},
		{"two prompts", []string{"--model", dir, "--ids", "1", "--prompt", "hi"}, "exactly one of"},
		{"AR with blocks", []string{"--model", tinyModel, "--ar", "--block-size", "4", "--ids", "1"}, "--block-size 4"},
		{"bad dtype", []string{"--model", dir, "--ids", "1", "--dtype", "i64"}, "want bf16, f16 or f32"},
		{"id outside vocab", []string{"--model", dir, "--ids", "1,9999"}, "outside the vocabulary"},
		{"bad threshold", []string{"--model", dir, "--ids", "1", "--threshold", "2"}, "threshold"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runGenerateCmd(t, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

// generate and serve share one stop rule: an eos id that only
// generation_config.json names ends both at the same token.
func TestGenerateStopsWhereServeStops(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Skip(err)
	}
	torch.SetNumThreads(1)
	dir := convertedTiny(t)
	chat := `[{"role":"user","content":"Hello, world"}]`
	chatFile := filepath.Join(t.TempDir(), "chat.json")
	if err := os.WriteFile(chatFile, []byte(chat), 0o644); err != nil {
		t.Fatal(err)
	}
	// 1. The greedy reply without stops; its fourth token, new there, is
	// made an eos id by generation_config.json alone.
	out, _, err := runGenerateCmd(t, "--model", dir, "--chat", chatFile, "--ignore-eos", "--max-tokens", "12", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var free generateOutput
	if err := json.Unmarshal([]byte(out), &free); err != nil {
		t.Fatal(err)
	}
	k := slices.IndexFunc(free.IDs, func(id int64) bool { return id != 1 && slices.Index(free.IDs, id) >= 3 })
	if k < 0 {
		t.Fatalf("no token to stop at in %v", free.IDs)
	}
	eos := free.IDs[k]
	gen := `{"bos_token_id": 0, "eos_token_id": [1, ` + strconv.FormatInt(eos, 10) + `]}`
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(gen), 0o644); err != nil {
		t.Fatal(err)
	}
	// 2. generate stops there.
	out, _, err = runGenerateCmd(t, "--model", dir, "--chat", chatFile, "--max-tokens", "12", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var stopped generateOutput
	if err := json.Unmarshal([]byte(out), &stopped); err != nil {
		t.Fatal(err)
	}
	if stopped.FinishReason != "stop" || !slices.Equal(stopped.IDs, free.IDs[:k]) && !slices.Equal(stopped.IDs, free.IDs[:k+1]) {
		t.Fatalf("generate: %+v; want a stop at %d, token %d of %v", stopped, eos, k, free.IDs)
	}
	// 3. serve stops there too: the same reply.
	url := startServe(t, dir)
	body := `{"messages": ` + chat + `, "max_tokens": 12}`
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("serve: %v %+v", err, r)
	}
	if r.Choices[0].FinishReason != "stop" || r.Usage.CompletionTokens != len(stopped.IDs) {
		t.Errorf("serve: finish %q after %d tokens; generate: stop after %d", r.Choices[0].FinishReason, r.Usage.CompletionTokens, len(stopped.IDs))
	}
}
