package model

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// TensorSpec is one weight a Llama-family checkpoint must hold, by its
// HuggingFace name and shape (PyTorch order: [out, in] for linear layers).
type TensorSpec struct {
	Name  string
	Shape []int64
}

// ExpectedTensors lists every weight of cfg's model in HF naming, in load
// order. lm_head.weight is listed only when the embeddings are untied.
func ExpectedTensors(cfg *Config) []TensorSpec {
	h := int64(cfg.HiddenSize)
	q := int64(cfg.NumAttentionHeads) * int64(cfg.HeadDim)
	kv := int64(cfg.NumKeyValueHeads) * int64(cfg.HeadDim)
	inter := int64(cfg.IntermediateSize)
	vocab := int64(cfg.VocabSize)

	specs := []TensorSpec{{"model.embed_tokens.weight", []int64{vocab, h}}}
	for l := 0; l < cfg.NumHiddenLayers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		specs = append(specs,
			TensorSpec{p + "input_layernorm.weight", []int64{h}},
			TensorSpec{p + "self_attn.q_proj.weight", []int64{q, h}},
			TensorSpec{p + "self_attn.k_proj.weight", []int64{kv, h}},
			TensorSpec{p + "self_attn.v_proj.weight", []int64{kv, h}},
		)
		if cfg.AttentionBias {
			specs = append(specs,
				TensorSpec{p + "self_attn.q_proj.bias", []int64{q}},
				TensorSpec{p + "self_attn.k_proj.bias", []int64{kv}},
				TensorSpec{p + "self_attn.v_proj.bias", []int64{kv}},
			)
		}
		specs = append(specs,
			TensorSpec{p + "self_attn.o_proj.weight", []int64{h, q}},
			TensorSpec{p + "post_attention_layernorm.weight", []int64{h}},
			TensorSpec{p + "mlp.gate_proj.weight", []int64{inter, h}},
			TensorSpec{p + "mlp.up_proj.weight", []int64{inter, h}},
			TensorSpec{p + "mlp.down_proj.weight", []int64{h, inter}},
		)
	}
	specs = append(specs, TensorSpec{"model.norm.weight", []int64{h}})
	if !cfg.TieWordEmbeddings {
		specs = append(specs, TensorSpec{"lm_head.weight", []int64{vocab, h}})
	}
	return specs
}

// ignorableTensor matches tensors a valid checkpoint may carry beyond
// ExpectedTensors: old transformers saved the RoPE inv_freq buffer, which is
// recomputed from the config anyway.
var ignorableTensor = regexp.MustCompile(`^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$`)

// maxListed caps each list in a CheckTensors error, so a wrong model type
// does not produce a thousand-line message.
const maxListed = 10

// CheckTensors compares a checkpoint's tensor shapes with ExpectedTensors and
// reports every missing, misshaped and unknown name in one error. A tied
// model may still carry lm_head.weight (some exporters write it); it must
// then be shaped like the embedding.
func CheckTensors(cfg *Config, shapes map[string][]int64) error {
	want := map[string][]int64{}
	for _, s := range ExpectedTensors(cfg) {
		want[s.Name] = s.Shape
	}
	if cfg.TieWordEmbeddings {
		if _, ok := shapes["lm_head.weight"]; ok {
			want["lm_head.weight"] = []int64{int64(cfg.VocabSize), int64(cfg.HiddenSize)}
		}
	}
	var missing, misshaped, unknown []string
	for name, shape := range want {
		got, ok := shapes[name]
		switch {
		case !ok:
			missing = append(missing, name)
		case !slices.Equal(got, shape):
			misshaped = append(misshaped, fmt.Sprintf("%s %v, want %v", name, got, shape))
		}
	}
	for name := range shapes {
		if _, ok := want[name]; !ok && !ignorableTensor.MatchString(name) {
			unknown = append(unknown, name)
		}
	}
	if len(missing)+len(misshaped)+len(unknown) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("checkpoint does not match config:")
	for _, l := range []struct {
		what  string
		names []string
	}{{"missing", missing}, {"misshaped", misshaped}, {"unknown", unknown}} {
		if len(l.names) == 0 {
			continue
		}
		slices.Sort(l.names)
		fmt.Fprintf(&b, " %d %s tensor(s): %s", len(l.names), l.what, strings.Join(l.names[:min(len(l.names), maxListed)], ", "))
		if len(l.names) > maxListed {
			fmt.Fprintf(&b, ", ... (%d more)", len(l.names)-maxListed)
		}
		b.WriteString(";")
	}
	return fmt.Errorf("%s", strings.TrimSuffix(b.String(), ";"))
}
