package model

import (
	"fmt"
	"strings"
	"testing"
)

func tinyConfig(t *testing.T) *Config {
	t.Helper()
	c, err := LoadConfig("../testdata/tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func specShapes(specs []TensorSpec) map[string][]int64 {
	m := map[string][]int64{}
	for _, s := range specs {
		m[s.Name] = s.Shape
	}
	return m
}

func TestExpectedTensors(t *testing.T) {
	c := tinyConfig(t)
	specs := ExpectedTensors(c)
	// embed + 3 layers * 9 + norm + lm_head
	if len(specs) != 1+3*9+1+1 {
		t.Errorf("%d tensors, want 30", len(specs))
	}
	m := specShapes(specs)
	for name, want := range map[string]string{
		"model.embed_tokens.weight":              "[512 64]",
		"model.layers.2.self_attn.q_proj.weight": "[64 64]",
		"model.layers.2.self_attn.k_proj.weight": "[32 64]",
		"model.layers.0.self_attn.o_proj.weight": "[64 64]",
		"model.layers.1.mlp.down_proj.weight":    "[64 160]",
		"model.layers.1.mlp.gate_proj.weight":    "[160 64]",
		"model.norm.weight":                      "[64]",
		"lm_head.weight":                         "[512 64]",
	} {
		if got := fmt.Sprint(m[name]); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}

	c.AttentionBias, c.TieWordEmbeddings = true, true
	m = specShapes(ExpectedTensors(c))
	if fmt.Sprint(m["model.layers.0.self_attn.v_proj.bias"]) != "[32]" || m["lm_head.weight"] != nil {
		t.Errorf("bias/tied tensors wrong: v bias %v, lm_head %v", m["model.layers.0.self_attn.v_proj.bias"], m["lm_head.weight"])
	}
}

func TestCheckTensors(t *testing.T) {
	c := tinyConfig(t)
	good := func() map[string][]int64 { return specShapes(ExpectedTensors(c)) }

	if err := CheckTensors(c, good()); err != nil {
		t.Fatal(err)
	}
	withInvFreq := good()
	withInvFreq["model.layers.0.self_attn.rotary_emb.inv_freq"] = []int64{8}
	if err := CheckTensors(c, withInvFreq); err != nil {
		t.Errorf("rotary inv_freq buffer should be tolerated: %v", err)
	}

	bad := good()
	delete(bad, "model.norm.weight")
	bad["model.layers.0.mlp.up_proj.weight"] = []int64{64, 160}
	bad["model.layers.0.self_attn.q_norm.weight"] = []int64{16}
	err := CheckTensors(c, bad)
	for _, want := range []string{"1 missing tensor(s): model.norm.weight",
		"1 misshaped tensor(s): model.layers.0.mlp.up_proj.weight [64 160], want [160 64]",
		"1 unknown tensor(s): model.layers.0.self_attn.q_norm.weight"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}

	// A tied model may carry lm_head.weight, but shaped like the embedding.
	c.TieWordEmbeddings = true
	if err := CheckTensors(c, good()); err != nil {
		t.Errorf("tied without lm_head: %v", err)
	}
	tied := good()
	tied["lm_head.weight"] = []int64{512, 64}
	if err := CheckTensors(c, tied); err != nil {
		t.Errorf("tied with lm_head: %v", err)
	}
	tied["lm_head.weight"] = []int64{64, 512}
	if err := CheckTensors(c, tied); err == nil || !strings.Contains(err.Error(), "lm_head.weight") {
		t.Errorf("misshaped tied lm_head accepted: %v", err)
	}

	// Everything missing: the list is capped.
	err = CheckTensors(c, map[string][]int64{})
	if err == nil || !strings.Contains(err.Error(), "29 missing") || !strings.Contains(err.Error(), "(19 more)") {
		t.Errorf("uncapped or wrong: %v", err)
	}
}
