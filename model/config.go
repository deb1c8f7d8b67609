// Package model holds what dllm knows about Llama-family checkpoints: the
// HuggingFace config.json, the tensor layout, and safetensors I/O.
package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Config is the subset of a HuggingFace config.json that fixes the maths of a
// Llama-family decoder. ParseConfig fills every defaulted field, so a Config
// never needs HF's class defaults to be interpreted.
type Config struct {
	// Architecture is architectures[0] (or derived from model_type).
	Architecture string
	// ModelType is model_type as written ("llama", "mistral", "qwen2", ...).
	ModelType string

	// Shapes, as named in config.json (vocab_size, hidden_size, ...).
	VocabSize         int
	HiddenSize        int
	IntermediateSize  int
	NumHiddenLayers   int
	NumAttentionHeads int
	// NumKeyValueHeads defaults to NumAttentionHeads (plain multi-head).
	NumKeyValueHeads int
	// HeadDim defaults to HiddenSize/NumAttentionHeads.
	HeadDim int
	// RMSNormEps defaults to 1e-6, the HF default of every accepted class.
	RMSNormEps float64

	// RopeTheta is the RoPE base; 10000 when the config gives none.
	RopeTheta float64
	// RopeScaling is nil for the original ("default") RoPE.
	RopeScaling *RopeScaling

	// MaxPositionEmbeddings defaults per architecture, as in HF's classes.
	MaxPositionEmbeddings int
	// TieWordEmbeddings means lm_head reuses model.embed_tokens.weight.
	TieWordEmbeddings bool

	// AttentionBias means q_proj, k_proj and v_proj carry biases (Qwen2);
	// o_proj never does in the architectures accepted here.
	AttentionBias bool

	// DType is the checkpoint's declared dtype ("bfloat16", "float16",
	// "float32"), or "" if the config does not say.
	DType string

	// BOSTokenID and PadTokenID are -1 when absent.
	BOSTokenID int
	PadTokenID int
	// EOSTokenIDs holds eos_token_id, which HF allows to be a list.
	EOSTokenIDs []int

	// HiddenAct is "silu", the only activation supported; ParseConfig sets
	// it, and "" in a hand-built Config means the same.
	HiddenAct string
}

// Architectures accepted, with the HF class defaults that differ between
// them. The values are those of transformers' configuration classes.
var archDefaults = map[string]struct {
	modelType string
	maxPos    int
}{
	"LlamaForCausalLM":   {"llama", 2048},
	"MistralForCausalLM": {"mistral", 4096 * 32},
	"Qwen2ForCausalLM":   {"qwen2", 32768},
	// Qwen3 is listed so its rejection can say why (qk-norm), not "unknown".
	"Qwen3ForCausalLM": {"qwen3", 32768},
}

// Sanity bounds: far above any real model, low enough that NumParams and
// friends cannot overflow int64.
const (
	maxDim    = 1 << 20 // hidden, head count, head_dim, ...
	maxInter  = 1 << 22
	maxVocab  = 1 << 24
	maxLayers = 1 << 12
)

// LoadConfig reads dir/config.json (dir may also name the file itself).
func LoadConfig(dir string) (*Config, error) {
	path := dir
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		path = filepath.Join(dir, "config.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// rawConfig mirrors config.json. Pointers tell "absent/null" from zero so
// that HF defaults are applied only where HF applies them.
type rawConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	VocabSize             *int            `json:"vocab_size"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	OrigMaxPos            *int            `json:"original_max_position_embeddings"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	TorchDType            *string         `json:"torch_dtype"`
	DType                 *string         `json:"dtype"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	PadTokenID            json.RawMessage `json:"pad_token_id"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
	HiddenAct             *string         `json:"hidden_act"`
	SlidingWindow         *int            `json:"sliding_window"`
	UseSlidingWindow      *bool           `json:"use_sliding_window"`
	LayerTypes            []string        `json:"layer_types"`
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
}

// ParseConfig parses and validates a config.json. Unknown fields are ignored
// (HF configs carry many), except the ones listed in mathFields: those change
// the forward pass, so a non-neutral value is an error rather than a model
// that silently computes something else.
func ParseConfig(data []byte) (*Config, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}

	c := &Config{ModelType: r.ModelType, BOSTokenID: -1, PadTokenID: -1}
	if err := c.setArchitecture(&r); err != nil {
		return nil, err
	}
	if err := checkMathFields(fields, &r); err != nil {
		return nil, err
	}

	req := []struct {
		name string
		src  *int
		dst  *int
	}{
		{"vocab_size", r.VocabSize, &c.VocabSize},
		{"hidden_size", r.HiddenSize, &c.HiddenSize},
		{"intermediate_size", r.IntermediateSize, &c.IntermediateSize},
		{"num_hidden_layers", r.NumHiddenLayers, &c.NumHiddenLayers},
		{"num_attention_heads", r.NumAttentionHeads, &c.NumAttentionHeads},
	}
	for _, f := range req {
		if f.src == nil {
			return nil, fmt.Errorf("config: missing %s", f.name)
		}
		*f.dst = *f.src
	}
	c.NumKeyValueHeads = c.NumAttentionHeads
	if r.NumKeyValueHeads != nil {
		c.NumKeyValueHeads = *r.NumKeyValueHeads
	}
	if r.HeadDim != nil {
		c.HeadDim = *r.HeadDim
	} else {
		if c.NumAttentionHeads <= 0 || c.HiddenSize%c.NumAttentionHeads != 0 {
			return nil, fmt.Errorf("config: head_dim absent and hidden_size %d not divisible by num_attention_heads %d",
				c.HiddenSize, c.NumAttentionHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	c.RMSNormEps = 1e-6 // HF default for all accepted architectures
	if r.RMSNormEps != nil {
		c.RMSNormEps = *r.RMSNormEps
	}
	c.MaxPositionEmbeddings = archDefaults[c.Architecture].maxPos
	if r.MaxPositionEmbeddings != nil {
		c.MaxPositionEmbeddings = *r.MaxPositionEmbeddings
	}
	if r.TieWordEmbeddings != nil {
		c.TieWordEmbeddings = *r.TieWordEmbeddings
	}
	c.HiddenAct = "silu"
	if r.HiddenAct != nil {
		c.HiddenAct = *r.HiddenAct
	}
	if c.HiddenAct == "swish" { // same function under its other name in HF's ACT2FN
		c.HiddenAct = "silu"
	}

	if err := c.setDType(&r); err != nil {
		return nil, err
	}
	if err := c.setTokenIDs(&r); err != nil {
		return nil, err
	}
	if err := c.setBiases(&r); err != nil {
		return nil, err
	}
	if err := c.checkSlidingWindow(&r); err != nil {
		return nil, err
	}
	if err := c.setRope(&r); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) setArchitecture(r *rawConfig) error {
	switch {
	case len(r.Architectures) > 0:
		c.Architecture = r.Architectures[0]
	case r.ModelType != "":
		for arch, d := range archDefaults {
			if d.modelType == r.ModelType {
				c.Architecture = arch
			}
		}
		if c.Architecture == "" {
			return fmt.Errorf("config: model_type %q is not supported (want llama, mistral or qwen2)", r.ModelType)
		}
	default:
		return errors.New("config: neither architectures nor model_type is set")
	}
	d, ok := archDefaults[c.Architecture]
	if !ok {
		return fmt.Errorf("config: architecture %q is not supported (want LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM)", c.Architecture)
	}
	if c.Architecture == "Qwen3ForCausalLM" {
		// Qwen3Attention always applies RMSNorm to q and k per head.
		return errors.New("config: qk-norm (Qwen3) is not supported")
	}
	if c.ModelType == "" {
		c.ModelType = d.modelType
	}
	return nil
}

// mathField is a config key that some Llama relative uses to alter the
// forward pass. neutral reports whether v leaves the Llama maths unchanged.
type mathField struct {
	name    string
	why     string
	neutral func(v float64, r *rawConfig) bool
}

func isZero(v float64, _ *rawConfig) bool { return v == 0 }
func isOne(v float64, _ *rawConfig) bool  { return v == 1 }
func never(float64, *rawConfig) bool      { return false }

// mathFields are rejected unless null or neutral. MiniCPM's muP scaling
// (scale_emb, dim_model_base, scale_depth) is here: MiniCPM5-2B's config has
// none of these keys, and a checkpoint with non-neutral values would need
// embedding/residual/logit scaling the model code does not implement.
var mathFields = []mathField{
	{"scale_emb", "MiniCPM embedding scale", isOne},
	{"dim_model_base", "MiniCPM logit scale hidden_size/dim_model_base", func(v float64, r *rawConfig) bool {
		return r.HiddenSize != nil && v == float64(*r.HiddenSize)
	}},
	{"scale_depth", "MiniCPM residual scale scale_depth/sqrt(num_hidden_layers)", func(v float64, r *rawConfig) bool {
		return r.NumHiddenLayers != nil && math.Abs(v-math.Sqrt(float64(*r.NumHiddenLayers))) < 1e-9
	}},
	{"embedding_multiplier", "Granite embedding scale", isOne},
	{"residual_multiplier", "Granite residual scale", isOne},
	{"logits_scaling", "Granite logit scale", isOne},
	{"logit_scale", "logit scale", isOne},
	// Neutral would be 1/sqrt(head_dim); simpler to require it absent.
	{"attention_multiplier", "attention softmax scale", never},
	{"attn_logit_softcapping", "attention logit soft-capping", isZero},
	{"final_logit_softcapping", "final logit soft-capping", isZero},
	{"num_experts", "mixture of experts", isZero},
	{"num_local_experts", "mixture of experts", isZero},
	{"n_routed_experts", "mixture of experts", isZero},
	{"moe_num_experts", "mixture of experts", isZero},
	{"num_experts_per_tok", "mixture of experts", isZero},
	{"qk_norm", "q/k RMSNorm", isZero},
	{"use_qk_norm", "q/k RMSNorm", isZero},
	{"qk_layernorm", "q/k LayerNorm", isZero},
	{"partial_rotary_factor", "partial rotary embedding", isOne},
}

func checkMathFields(fields map[string]json.RawMessage, r *rawConfig) error {
	for _, f := range mathFields {
		raw, ok := fields[f.name]
		if !ok || string(raw) == "null" {
			continue
		}
		var v float64
		var b bool
		switch {
		case json.Unmarshal(raw, &v) == nil:
		case json.Unmarshal(raw, &b) == nil:
			if b {
				v = 1
			}
		default:
			return fmt.Errorf("config: %s (%s) = %s is not supported", f.name, f.why, raw)
		}
		if !f.neutral(v, r) {
			return fmt.Errorf("config: %s (%s) = %s is not supported", f.name, f.why, raw)
		}
	}
	if raw, ok := fields["quantization_config"]; ok && string(raw) != "null" {
		return errors.New("config: quantization_config is set: quantized checkpoints are not supported")
	}
	return nil
}

func (c *Config) setDType(r *rawConfig) error {
	s := r.DType // transformers v5 name; torch_dtype is the v4 one
	if s == nil {
		s = r.TorchDType
	}
	if s == nil {
		return nil
	}
	switch d := strings.TrimPrefix(*s, "torch."); d {
	case "bfloat16", "float16", "float32":
		c.DType = d
	case "float", "half":
		c.DType = map[string]string{"float": "float32", "half": "float16"}[d]
	default:
		return fmt.Errorf("config: dtype %q is not supported (want bfloat16, float16 or float32)", *s)
	}
	return nil
}

// tokenIDs accepts null, an int, or a list of ints, as HF writes all three.
func tokenIDs(name string, raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if json.Unmarshal(raw, &one) == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("config: %s must be an int or a list of ints, got %s", name, raw)
	}
	return many, nil
}

func (c *Config) setTokenIDs(r *rawConfig) error {
	bos, err := tokenIDs("bos_token_id", r.BOSTokenID)
	if err != nil {
		return err
	}
	eos, err := tokenIDs("eos_token_id", r.EOSTokenID)
	if err != nil {
		return err
	}
	pad, err := tokenIDs("pad_token_id", r.PadTokenID)
	if err != nil {
		return err
	}
	if len(bos) > 0 {
		c.BOSTokenID = bos[0]
	}
	// Some old Llama conversions write pad_token_id -1 for "none".
	if len(pad) > 0 && pad[0] >= 0 {
		c.PadTokenID = pad[0]
	}
	c.EOSTokenIDs = eos
	return nil
}

func (c *Config) setBiases(r *rawConfig) error {
	if r.MLPBias != nil && *r.MLPBias {
		return errors.New("config: mlp_bias=true is not supported")
	}
	switch c.Architecture {
	case "Qwen2ForCausalLM":
		// Qwen2Attention hard-codes bias on q/k/v and none on o_proj.
		c.AttentionBias = true
	default:
		// LlamaAttention puts attention_bias on o_proj too, which the model
		// code does not carry.
		if r.AttentionBias != nil && *r.AttentionBias {
			return fmt.Errorf("config: attention_bias=true (biases on q/k/v and o_proj) is not supported for %s", c.Architecture)
		}
	}
	return nil
}

func (c *Config) checkSlidingWindow(r *rawConfig) error {
	for _, t := range r.LayerTypes {
		if t != "full_attention" {
			return fmt.Errorf("config: layer_types contains %q: only full attention is supported", t)
		}
	}
	switch c.Architecture {
	case "MistralForCausalLM":
		// A window at least as long as the context never masks anything.
		if r.SlidingWindow != nil && *r.SlidingWindow < c.MaxPositionEmbeddings {
			return fmt.Errorf("config: sliding_window=%d < max_position_embeddings=%d: sliding-window attention is not supported",
				*r.SlidingWindow, c.MaxPositionEmbeddings)
		}
	case "Qwen2ForCausalLM":
		// Qwen2 configs carry sliding_window even when it is switched off.
		if r.UseSlidingWindow != nil && *r.UseSlidingWindow {
			return errors.New("config: use_sliding_window=true: sliding-window attention is not supported")
		}
	}
	return nil
}

// Validate checks that the dimensions are consistent and the RoPE parameters
// usable. ParseConfig calls it; call it again after editing a Config by hand.
func (c *Config) Validate() error {
	dims := []struct {
		name   string
		v, max int
	}{
		{"vocab_size", c.VocabSize, maxVocab},
		{"hidden_size", c.HiddenSize, maxDim},
		{"intermediate_size", c.IntermediateSize, maxInter},
		{"num_hidden_layers", c.NumHiddenLayers, maxLayers},
		{"num_attention_heads", c.NumAttentionHeads, maxDim},
		{"num_key_value_heads", c.NumKeyValueHeads, maxDim},
		{"head_dim", c.HeadDim, maxDim},
		{"max_position_embeddings", c.MaxPositionEmbeddings, math.MaxInt32},
	}
	for _, d := range dims {
		if d.v <= 0 || d.v > d.max {
			return fmt.Errorf("config: %s=%d out of range (1..%d)", d.name, d.v, d.max)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("config: num_attention_heads=%d not a multiple of num_key_value_heads=%d",
			c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if int64(c.NumAttentionHeads)*int64(c.HeadDim) > maxDim {
		return fmt.Errorf("config: num_attention_heads*head_dim=%d too large", int64(c.NumAttentionHeads)*int64(c.HeadDim))
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("config: head_dim=%d must be even for RoPE", c.HeadDim)
	}
	if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
		return fmt.Errorf("config: rms_norm_eps=%g must be positive", c.RMSNormEps)
	}
	if c.HiddenAct != "silu" && c.HiddenAct != "" {
		return fmt.Errorf("config: hidden_act %q is not supported (want silu)", c.HiddenAct)
	}
	for _, t := range append([]int{c.BOSTokenID, c.PadTokenID}, c.EOSTokenIDs...) {
		if t >= c.VocabSize || t < -1 {
			return fmt.Errorf("config: token id %d outside vocab_size=%d", t, c.VocabSize)
		}
	}
	for _, t := range c.EOSTokenIDs {
		if t < 0 {
			return fmt.Errorf("config: eos_token_id %d is negative", t)
		}
	}
	return c.validateRope()
}

// NumParams is the parameter count implied by the shapes of ExpectedTensors
// (lm_head counted only when untied, as HF's num_parameters does).
func (c *Config) NumParams() int64 {
	var n int64
	for _, t := range ExpectedTensors(c) {
		n += numElements(t.Shape)
	}
	return n
}

// KVBytesPerToken is the KV-cache footprint of one token across all layers
// for an element size of dtypeSize bytes (2 for bf16).
func (c *Config) KVBytesPerToken(dtypeSize int) int64 {
	return 2 * int64(c.NumHiddenLayers) * int64(c.NumKeyValueHeads) * int64(c.HeadDim) * int64(dtypeSize)
}

func numElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}
