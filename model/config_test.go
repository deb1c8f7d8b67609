package model

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestLoadConfigMiniCPM5(t *testing.T) {
	c, err := LoadConfig("../testdata/minicpm5-2b-shape")
	if err != nil {
		t.Fatal(err)
	}
	// MiniCPM5-2B's published facts (its model card and config.json).
	want := Config{
		Architecture: "LlamaForCausalLM", ModelType: "llama",
		VocabSize: 130560, HiddenSize: 2048, IntermediateSize: 6144,
		NumHiddenLayers: 42, NumAttentionHeads: 16, NumKeyValueHeads: 2, HeadDim: 128,
		RMSNormEps: 1e-6, RopeTheta: 5e6, MaxPositionEmbeddings: 131072,
		DType: "bfloat16", BOSTokenID: 0, PadTokenID: 1, EOSTokenIDs: []int{1, 130073},
		HiddenAct: "silu",
	}
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("got  %+v\nwant %+v", *c, want)
	}
	if got := c.NumParams(); got != 2_516_756_480 {
		t.Errorf("NumParams = %d, want 2,516,756,480", got)
	}
	if got := c.KVBytesPerToken(2); got != 43_008 {
		t.Errorf("KVBytesPerToken(bf16) = %d, want 43,008", got)
	}
}

func TestLoadConfigTinyLlama(t *testing.T) {
	// transformers v5 layout: rope_theta inside rope_parameters, "dtype".
	c, err := LoadConfig("../testdata/tiny-llama/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 5e6 || c.RopeScaling != nil || c.DType != "float32" || c.HeadDim != 16 ||
		c.NumKeyValueHeads != 2 || !slices.Equal(c.EOSTokenIDs, []int{1}) || c.AttentionBias {
		t.Errorf("unexpected config %+v", *c)
	}
}

// baseConfig is a small valid Llama config.json; tests edit a copy.
func baseConfig() map[string]any {
	return map[string]any{
		"architectures":           []any{"LlamaForCausalLM"},
		"model_type":              "llama",
		"vocab_size":              100,
		"hidden_size":             32,
		"intermediate_size":       64,
		"num_hidden_layers":       2,
		"num_attention_heads":     4,
		"num_key_value_heads":     2,
		"max_position_embeddings": 1024,
		"rms_norm_eps":            1e-5,
		"hidden_act":              "silu",
		"eos_token_id":            2,
	}
}

func parseEdited(t *testing.T, edit map[string]any) (*Config, error) {
	t.Helper()
	m := baseConfig()
	for k, v := range edit {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return ParseConfig(b)
}

// null stands for JSON null in edits (a nil value deletes the key).
var null = json.RawMessage("null")

func TestParseConfigAccepts(t *testing.T) {
	tests := []struct {
		name  string
		edit  map[string]any
		check func(*Config) bool
	}{
		{"defaults", map[string]any{"num_key_value_heads": nil, "rms_norm_eps": nil},
			func(c *Config) bool {
				return c.NumKeyValueHeads == 4 && c.HeadDim == 8 && c.RMSNormEps == 1e-6 &&
					c.RopeTheta == 10000 && !c.TieWordEmbeddings && c.BOSTokenID == -1 && c.DType == ""
			}},
		{"null kv heads and head_dim", map[string]any{"num_key_value_heads": null, "head_dim": null},
			func(c *Config) bool { return c.NumKeyValueHeads == 4 && c.HeadDim == 8 }},
		{"explicit head_dim", map[string]any{"head_dim": 16},
			func(c *Config) bool { return c.HeadDim == 16 && c.NumParams() > 0 }},
		{"model_type only", map[string]any{"architectures": nil},
			func(c *Config) bool { return c.Architecture == "LlamaForCausalLM" }},
		{"torch_dtype", map[string]any{"torch_dtype": "bfloat16"},
			func(c *Config) bool { return c.DType == "bfloat16" }},
		{"dtype wins over torch_dtype", map[string]any{"torch_dtype": "float32", "dtype": "float16"},
			func(c *Config) bool { return c.DType == "float16" }},
		{"eos list, bos null", map[string]any{"eos_token_id": []int{1, 2}, "bos_token_id": null},
			func(c *Config) bool { return slices.Equal(c.EOSTokenIDs, []int{1, 2}) && c.BOSTokenID == -1 }},
		{"pad -1 means none", map[string]any{"pad_token_id": -1},
			func(c *Config) bool { return c.PadTokenID == -1 }},
		{"swish is silu", map[string]any{"hidden_act": "swish"},
			func(c *Config) bool { return c.HiddenAct == "silu" }},
		{"biases false", map[string]any{"attention_bias": false, "mlp_bias": false},
			func(c *Config) bool { return !c.AttentionBias }},
		{"tied", map[string]any{"tie_word_embeddings": true},
			func(c *Config) bool { return c.TieWordEmbeddings }},
		{"neutral MiniCPM fields", map[string]any{"scale_emb": 1, "dim_model_base": 32, "scale_depth": 1.4142135623730951},
			func(c *Config) bool { return true }},
		{"null MoE field", map[string]any{"num_experts": null, "num_local_experts": 0},
			func(c *Config) bool { return true }},
		{"legacy rope_scaling type key", map[string]any{"rope_scaling": map[string]any{"type": "linear", "factor": 2}},
			func(c *Config) bool { return c.RopeScaling.Type == "linear" && c.RopeScaling.Factor == 2 }},
		{"rope_scaling wins over rope_parameters", map[string]any{
			"rope_scaling":    map[string]any{"rope_type": "linear", "factor": 2},
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 7.0}},
			func(c *Config) bool { return c.RopeScaling.Type == "linear" && c.RopeTheta == 10000 }},
		{"rope_theta in dict wins", map[string]any{"rope_theta": 500.0,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 7.0}},
			func(c *Config) bool { return c.RopeScaling == nil && c.RopeTheta == 7 }},
		{"yarn defaults", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4}},
			func(c *Config) bool {
				s := c.RopeScaling
				return s.OriginalMaxPositionEmbeddings == 1024 && !s.NoTruncate && s.Factor == 4
			}},
		{"yarn factor from lengths", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn",
			"original_max_position_embeddings": 256, "truncate": false}},
			func(c *Config) bool { return c.RopeScaling.Factor == 4 && c.RopeScaling.NoTruncate }},
		{"llama3 top-level original_max_position_embeddings wins", map[string]any{
			"original_max_position_embeddings": 512,
			"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
				"high_freq_factor": 4, "original_max_position_embeddings": 256}},
			func(c *Config) bool { return c.RopeScaling.OriginalMaxPositionEmbeddings == 512 }},
		{"mistral without window", map[string]any{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "sliding_window": null},
			func(c *Config) bool { return c.Architecture == "MistralForCausalLM" }},
		{"mistral window covers context", map[string]any{"architectures": []string{"MistralForCausalLM"}, "sliding_window": 1024},
			func(c *Config) bool { return true }},
		{"qwen2 has qkv bias", map[string]any{"architectures": []string{"Qwen2ForCausalLM"}, "model_type": "qwen2",
			"use_sliding_window": false, "sliding_window": 64, "max_window_layers": 1},
			func(c *Config) bool { return c.AttentionBias }},
		{"full-attention layer_types", map[string]any{"layer_types": []string{"full_attention", "full_attention"}},
			func(c *Config) bool { return true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseEdited(t, tt.edit)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("unexpected config %+v (rope %+v)", *c, c.RopeScaling)
			}
		})
	}
}

func TestParseConfigRejects(t *testing.T) {
	tests := []struct {
		name string
		edit map[string]any
		want string // substring of the error
	}{
		{"not JSON", map[string]any{"vocab_size": "x"}, "vocab_size"},
		{"missing hidden_size", map[string]any{"hidden_size": nil}, "missing hidden_size"},
		{"unknown architecture", map[string]any{"architectures": []string{"GPT2LMHeadModel"}}, `"GPT2LMHeadModel" is not supported`},
		{"unknown model_type", map[string]any{"architectures": nil, "model_type": "gpt2"}, `model_type "gpt2"`},
		{"qwen3", map[string]any{"architectures": []string{"Qwen3ForCausalLM"}}, "qk-norm (Qwen3) is not supported"},
		{"qk_norm flag", map[string]any{"qk_norm": true}, "qk_norm"},
		{"mixtral experts", map[string]any{"num_local_experts": 8}, "num_local_experts"},
		{"qwen moe experts", map[string]any{"num_experts": 64}, "num_experts"},
		{"deepseek experts", map[string]any{"n_routed_experts": 64}, "n_routed_experts"},
		{"MiniCPM scale_emb", map[string]any{"scale_emb": 12}, "scale_emb"},
		{"MiniCPM dim_model_base", map[string]any{"dim_model_base": 256}, "dim_model_base"},
		{"MiniCPM scale_depth", map[string]any{"scale_depth": 1.4}, "scale_depth"},
		{"softcapping", map[string]any{"final_logit_softcapping": 30.0}, "final_logit_softcapping"},
		{"partial rotary", map[string]any{"partial_rotary_factor": 0.5}, "partial_rotary_factor"},
		{"partial rotary in rope dict", map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "partial_rotary_factor": 0.5}}, "partial_rotary_factor"},
		{"quantized", map[string]any{"quantization_config": map[string]any{"quant_method": "gptq"}}, "quantization_config"},
		{"gelu", map[string]any{"hidden_act": "gelu"}, `hidden_act "gelu"`},
		{"mlp bias", map[string]any{"mlp_bias": true}, "mlp_bias"},
		{"llama attention bias", map[string]any{"attention_bias": true}, "attention_bias"},
		{"mistral sliding window", map[string]any{"architectures": []string{"MistralForCausalLM"}, "sliding_window": 512}, "sliding_window=512"},
		{"qwen2 sliding window", map[string]any{"architectures": []string{"Qwen2ForCausalLM"}, "use_sliding_window": true}, "use_sliding_window"},
		{"sliding layer_types", map[string]any{"layer_types": []string{"full_attention", "sliding_attention"}}, "sliding_attention"},
		{"dynamic rope", map[string]any{"rope_scaling": map[string]any{"rope_type": "dynamic", "factor": 2}}, `"dynamic" is not supported`},
		{"longrope", map[string]any{"rope_scaling": map[string]any{"type": "longrope", "factor": 2}}, `"longrope" is not supported`},
		{"mrope", map[string]any{"rope_scaling": map[string]any{"type": "default", "mrope_section": []int{1, 2}}}, "mrope_section"},
		{"per-layer rope", map[string]any{"rope_parameters": map[string]any{"full_attention": map[string]any{"rope_type": "default"}}}, "per-layer-type"},
		{"linear without factor", map[string]any{"rope_scaling": map[string]any{"rope_type": "linear"}}, "needs factor"},
		{"llama3 bad band", map[string]any{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4}}, "low_freq_factor"},
		{"negative rope_theta", map[string]any{"rope_theta": -1}, "rope_theta"},
		{"kv heads do not divide", map[string]any{"num_key_value_heads": 3}, "not a multiple"},
		{"odd head_dim", map[string]any{"head_dim": 7}, "must be even"},
		{"head_dim not derivable", map[string]any{"num_attention_heads": 5, "num_key_value_heads": 5}, "not divisible"},
		{"zero layers", map[string]any{"num_hidden_layers": 0}, "num_hidden_layers=0"},
		{"huge vocab", map[string]any{"vocab_size": 1 << 40}, "vocab_size"},
		{"eos outside vocab", map[string]any{"eos_token_id": []int{1, 100}}, "token id 100"},
		{"eos as string", map[string]any{"eos_token_id": "2"}, "eos_token_id"},
		{"bad dtype", map[string]any{"torch_dtype": "int8"}, `dtype "int8"`},
		{"zero eps", map[string]any{"rms_norm_eps": 0}, "rms_norm_eps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseEdited(t, tt.edit)
			if err == nil {
				t.Fatalf("accepted: %+v", *c)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "config: ") {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestParseConfigNotJSON(t *testing.T) {
	for _, in := range []string{"", "[]", "{", `{"hidden_size": 1e400}`} {
		if _, err := ParseConfig([]byte(in)); err == nil {
			t.Errorf("ParseConfig(%q) accepted", in)
		}
	}
}

// FuzzParseConfig: any input either fails cleanly or yields a Config whose
// derived values can be computed without panicking.
func FuzzParseConfig(f *testing.F) {
	for _, p := range []string{"../testdata/minicpm5-2b-shape/config.json", "../testdata/tiny-llama/config.json"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"model_type":"llama","vocab_size":8,"hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,` +
		`"num_attention_heads":2,"rope_scaling":{"type":"yarn","factor":4,"original_max_position_embeddings":64}}`))
	f.Add([]byte(`{"model_type":"llama","vocab_size":8,"hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,` +
		`"num_attention_heads":2,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if c.NumParams() <= 0 || c.KVBytesPerToken(2) <= 0 || len(c.InvFreq()) != c.HeadDim/2 || !(c.RopeAttentionScale() > 0) {
			t.Fatalf("bad derived values for %+v", *c)
		}
		for i, v := range c.InvFreq() {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Fatalf("inv_freq[%d] = %g for %+v (rope %+v)", i, v, *c, c.RopeScaling)
			}
		}
	})
}
