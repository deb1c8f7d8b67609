package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// runCmd runs `dllm args...` with the given subcommands and returns stdout.
func runCmd(t *testing.T, cmds []*cli.Command, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := &cli.Command{Name: "dllm", Writer: &out, ErrWriter: &out, Commands: cmds}
	err := app.Run(context.Background(), append([]string{"dllm"}, args...))
	return out.String(), err
}

func TestInspectCommand(t *testing.T) {
	out, err := runCmd(t, []*cli.Command{inspectCommand()}, "inspect", "--json", tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	var info modelInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// Values from testdata/tiny-llama/config.json: 512*64*2 embeddings+head,
	// 3 layers of (64*64 + 2*32*64 + 64*64 + 3*160*64 + 2*64), final norm.
	want := modelInfo{Architecture: "LlamaForCausalLM", Params: 195008, DType: "F32", Layers: 3, Hidden: 64,
		Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 512, Tokenizer: true, ChatTemplate: true, Tensors: 30}
	if info.Architecture != want.Architecture || info.Params != want.Params || info.DType != want.DType ||
		info.Layers != want.Layers || info.Heads != want.Heads || info.KVHeads != want.KVHeads ||
		info.HeadDim != want.HeadDim || info.Vocab != want.Vocab || !info.Tokenizer || !info.ChatTemplate ||
		info.Tensors != want.Tensors || info.Bytes != 195008*4 || info.Diffusion != nil {
		t.Errorf("inspect = %+v", info)
	}
	text, err := runCmd(t, []*cli.Command{inspectCommand()}, "inspect", tinyModel)
	if err != nil || !strings.Contains(text, "LlamaForCausalLM") || !strings.Contains(text, "diffusion     none") {
		t.Errorf("text inspect: %v\n%s", err, text)
	}
	// A converted model shows its diffusion settings.
	conv := t.TempDir() + "/m"
	if _, err := runCmd(t, []*cli.Command{convertCommand()}, "convert", "--from", tinyModel, "--out", conv, "--hash", "fast"); err != nil {
		t.Fatal(err)
	}
	text, err = runCmd(t, []*cli.Command{inspectCommand()}, "inspect", conv)
	if err != nil || !strings.Contains(text, `"mask_token":"<|mask|>"`) || !strings.Contains(text, `"mask_token_id":500`) {
		t.Errorf("inspect of a converted model: %v\n%s", err, text)
	}
	for _, args := range [][]string{{"inspect"}, {"inspect", "../../testdata/nope"}, {"inspect", "../../testdata"}} {
		if _, err := runCmd(t, []*cli.Command{inspectCommand()}, args...); err == nil {
			t.Errorf("%v should fail", args)
		}
	}
}

func TestLogitsCommandMatchesTransformers(t *testing.T) {
	b, err := os.ReadFile(tinyModel + "/expected_logits.json")
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		InputIDs     []int64     `json:"input_ids"`
		CausalLogits [][]float64 `json:"causal_logits"`
		BidirLogits  [][]float64 `json:"bidirectional_logits"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, id := range e.InputIDs {
		ids = append(ids, jsonNum(id))
	}
	for _, c := range []struct {
		att  string
		want [][]float64
	}{{"causal", e.CausalLogits}, {"bidirectional", e.BidirLogits}} {
		out, err := runCmd(t, []*cli.Command{logitsCommand()}, "logits", "--model", tinyModel,
			"--ids", strings.Join(ids, ","), "--attention", c.att, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Logits [][]float64 }
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Logits) != len(c.want) {
			t.Fatalf("%s: %d rows", c.att, len(got.Logits))
		}
		for i := range c.want {
			var num, den float64
			for j := range c.want[i] {
				d := got.Logits[i][j] - c.want[i][j]
				num += d * d
				den += c.want[i][j] * c.want[i][j]
			}
			if r := math.Sqrt(num / den); r > 1e-4 {
				t.Fatalf("%s row %d: relative error %.2e", c.att, i, r)
			}
		}
	}
	bad := [][]string{
		{"logits", "--model", tinyModel, "--ids", "1,x"},
		{"logits", "--model", tinyModel, "--ids", "1,9999"},
		{"logits", "--model", tinyModel, "--ids", ""},
		{"logits", "--model", tinyModel, "--ids", "1", "--attention", "sideways"},
		{"logits", "--model", tinyModel, "--ids", "1", "--dtype", "f8"},
		{"logits", "--model", tinyModel, "--ids", "1", "--device", "cuda:7"},
	}
	for _, args := range bad {
		if _, err := runCmd(t, []*cli.Command{logitsCommand()}, args...); err == nil {
			t.Errorf("%v should fail", args)
		}
	}
}

func jsonNum(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
