package model

import (
	"fmt"
	"strconv"
	"strings"

	"dllm/torch"
)

// Model is a Llama-family decoder with its weights on one device. The maths
// is HF's LlamaForCausalLM: embed, then per layer a pre-norm GQA attention
// sublayer with RoPE and a pre-norm SiLU-gated MLP, then RMSNorm and the head.
type Model struct {
	Config *Config
	Device torch.Device
	DType  torch.DType

	Embed  *torch.Tensor // (V, C)
	Layers []Layer
	Norm   *torch.Tensor // (C)
	Head   *torch.Tensor // (V, C); the same tensor as Embed when tied

	// NoNormFold and NoPersistentKernel are NewDecoder's choices
	// (torch.DecoderSpec's), from LoadOptions.
	NoNormFold, NoPersistentKernel bool

	invFreq *torch.Tensor // (D/2) float32, on Device
}

// Layer holds one decoder layer's weights in HF layout.
type Layer struct {
	Attn torch.AttnWeights
	MLP  torch.MLPWeights

	// The stacked projections of a model used by a Decoder (fuse); Attn
	// and MLP then hold views of them.
	qkv, bqkv, gateUp *torch.Tensor
}

// AttentionKind names how positions may attend to each other.
type AttentionKind int

// The attention patterns a forward pass can use.
const (
	Causal        AttentionKind = iota // each token sees itself and earlier tokens
	Bidirectional                      // every token sees every token
	BlockCausal                        // full inside fixed blocks, causal across them
)

// Attention is an attention pattern; Block is the block size of BlockCausal.
// Blocks are aligned to absolute positions: position p is in block p/Block.
type Attention struct {
	Kind  AttentionKind
	Block int
}

func (a Attention) String() string {
	switch a.Kind {
	case Bidirectional:
		return "bidirectional"
	case BlockCausal:
		return "block:" + strconv.Itoa(a.Block)
	}
	return "causal"
}

// ParseAttention reads "causal", "bidirectional" or "block:N".
func ParseAttention(s string) (Attention, error) {
	switch {
	case s == "causal":
		return Attention{Kind: Causal}, nil
	case s == "bidirectional":
		return Attention{Kind: Bidirectional}, nil
	case strings.HasPrefix(s, "block:"):
		n, err := strconv.Atoi(s[6:])
		if err == nil && n >= 1 {
			return Attention{Kind: BlockCausal, Block: n}, nil
		}
	}
	return Attention{}, fmt.Errorf("unknown attention %q (want causal, bidirectional or block:N with N >= 1)", s)
}

// LoadOptions choose where and in what precision weights live.
type LoadOptions struct {
	Device torch.Device
	// DType of the weights in memory; zero keeps the checkpoint's dtype.
	DType torch.DType
	// NoNormFold saves the decoder's copies of the QKV and gate-up weights
	// with the RMSNorm folded in (their size again: 2.4 GB for
	// MiniCPM5-2B) for 3-4% slower block steps.
	NoNormFold bool
	// NoPersistentKernel keeps the decoder's block steps off the
	// persistent kernel, which needs all its CTAs resident at once: for a
	// GPU shared through MPS.
	NoPersistentKernel bool
}

// Load reads config.json and the safetensors checkpoint in dir. Weights are
// copied from the memory-mapped files straight to the device, so a GPU load
// holds at most one tensor's worth of extra host memory.
func Load(dir string, o LoadOptions) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	return FromCheckpoint(cfg, ck, o)
}

// FromCheckpoint builds a model from an open checkpoint after checking that it
// holds exactly the tensors cfg calls for.
func FromCheckpoint(cfg *Config, ck *Checkpoint, o LoadOptions) (m *Model, err error) {
	if err := CheckTensors(cfg, ck.Shapes()); err != nil {
		return nil, err
	}
	if err := torch.Load(); err != nil {
		return nil, err
	}
	defer torch.Recover(&err)
	if o.DType == 0 {
		o.DType = checkpointDType(ck)
	}
	get := func(name string) *torch.Tensor {
		info, _ := ck.Tensor(name)
		b, err := ck.Bytes(name)
		if err != nil {
			panic(&torch.Error{Op: "load " + name, Msg: err.Error()})
		}
		src, err := torch.ParseDType(strings.ToLower(info.DType.String()))
		if err != nil {
			panic(&torch.Error{Op: "load " + name, Msg: err.Error()})
		}
		t := torch.FromBytes(b, src, info.Shape, o.Device)
		if src == o.DType {
			return t
		}
		defer t.Free()
		return t.To(o.DType, o.Device)
	}
	return build(cfg, o, get)
}

// checkpointDType is the dtype of the embedding, which sets the model's.
func checkpointDType(ck *Checkpoint) torch.DType {
	info, _ := ck.Tensor("model.embed_tokens.weight")
	if d, err := torch.ParseDType(strings.ToLower(info.DType.String())); err == nil {
		return d
	}
	return torch.Float32
}

// NewRandom builds a model of cfg's shape with weights drawn from N(0, std²)
// (norms at 1): for speed and memory work at the real size without weights.
func NewRandom(cfg *Config, o LoadOptions, seed uint64, std float64) (m *Model, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := torch.Load(); err != nil {
		return nil, err
	}
	defer torch.Recover(&err)
	if o.DType == 0 {
		o.DType = torch.BFloat16
	}
	torch.ManualSeed(seed)
	shapes := map[string][]int64{}
	for _, s := range ExpectedTensors(cfg) {
		shapes[s.Name] = s.Shape
	}
	get := func(name string) *torch.Tensor {
		shape := shapes[name]
		if len(shape) == 1 {
			return torch.Ones(shape, o.DType, o.Device)
		}
		r := torch.Randn(shape, o.DType, o.Device)
		defer r.Free()
		return r.MulScalar(std)
	}
	return build(cfg, o, get)
}

// build assembles a Model from a weight source keyed by HF tensor names.
func build(cfg *Config, o LoadOptions, get func(string) *torch.Tensor) (*Model, error) {
	m := &Model{Config: cfg, Device: o.Device, DType: o.DType, NoNormFold: o.NoNormFold, NoPersistentKernel: o.NoPersistentKernel}
	m.Embed = get("model.embed_tokens.weight")
	for l := 0; l < cfg.NumHiddenLayers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		var ly Layer
		ly.Attn.Norm = get(p + "input_layernorm.weight")
		ly.Attn.Q = get(p + "self_attn.q_proj.weight")
		ly.Attn.K = get(p + "self_attn.k_proj.weight")
		ly.Attn.V = get(p + "self_attn.v_proj.weight")
		ly.Attn.O = get(p + "self_attn.o_proj.weight")
		if cfg.AttentionBias {
			ly.Attn.BQ = get(p + "self_attn.q_proj.bias")
			ly.Attn.BK = get(p + "self_attn.k_proj.bias")
			ly.Attn.BV = get(p + "self_attn.v_proj.bias")
		}
		ly.MLP.Norm = get(p + "post_attention_layernorm.weight")
		ly.MLP.Gate = get(p + "mlp.gate_proj.weight")
		ly.MLP.Up = get(p + "mlp.up_proj.weight")
		ly.MLP.Down = get(p + "mlp.down_proj.weight")
		m.Layers = append(m.Layers, ly)
	}
	m.Norm = get("model.norm.weight")
	if cfg.TieWordEmbeddings {
		m.Head = m.Embed
	} else {
		m.Head = get("lm_head.weight")
	}
	m.invFreq = RopeFrequencies(cfg, o.Device)
	return m, nil
}

// RopeFrequencies puts the RoPE inverse frequencies (D/2) float32 on dev,
// as every forward pass (serving and training) uses them. The default RoPE's are
// computed as transformers computes them, 1 / theta^(2i/D) in float32 ops of
// libtorch on the model's device, so bf16 cos and sin round exactly where
// HF's do: Config.InvFreq's float64 values differ by one float32 ulp in 18 of
// MiniCPM5-2B's 64 frequencies, which flips a few bf16 roundings that 42
// random layers amplify to 2e-2 in the logits (docs/gpu.md). Scaled RoPE
// keeps the float64 formulas, which agree to float32 rounding.
func RopeFrequencies(cfg *Config, dev torch.Device) *torch.Tensor {
	if cfg.RopeScaling == nil {
		i := torch.Arange(0, int64(cfg.HeadDim/2), torch.Float32, dev)
		defer i.Free()
		i2 := i.MulScalar(2) // (D/2) 0, 2, 4, ...: exact
		defer i2.Free()
		x := i2.DivScalar(float64(cfg.HeadDim))
		defer x.Free()
		theta := torch.Full(nil, cfg.RopeTheta, torch.Float32, dev)
		defer theta.Free()
		p := theta.Pow(x)
		defer p.Free()
		one := torch.Full(nil, 1, torch.Float32, dev)
		defer one.Free()
		return one.Div(p)
	}
	inv := cfg.InvFreq()
	f := make([]float32, len(inv))
	for i, v := range inv {
		f[i] = float32(v)
	}
	cpu := torch.FromSlice(f)
	defer cpu.Free()
	return cpu.To(torch.Float32, dev)
}

// Params lists every weight tensor once, in load order.
func (m *Model) Params() []*torch.Tensor {
	ps := []*torch.Tensor{m.Embed}
	for i := range m.Layers {
		a, f := &m.Layers[i].Attn, &m.Layers[i].MLP
		ps = append(ps, a.Norm, a.Q, a.K, a.V, a.O)
		if a.BQ != nil {
			ps = append(ps, a.BQ, a.BK, a.BV)
		}
		ps = append(ps, f.Norm, f.Gate, f.Up, f.Down)
	}
	ps = append(ps, m.Norm)
	if m.Head != m.Embed {
		ps = append(ps, m.Head)
	}
	return ps
}

// Free releases every weight.
func (m *Model) Free() {
	torch.Free(m.Params()...)
	for i := range m.Layers {
		l := &m.Layers[i]
		torch.Free(l.qkv, l.bqkv, l.gateUp)
	}
	m.invFreq.Free()
}

// KVCache holds each layer's keys and values for up to Max positions,
// preallocated once so that decoding only writes in place.
type KVCache struct {
	K, V []*torch.Tensor // per layer (B, Hkv, Max, D)
	Len  int64           // positions [0, Len) hold committed context
	Max  int64
}

// NewCache allocates a cache for batch sequences of up to maxLen positions.
func (m *Model) NewCache(batch, maxLen int) (c *KVCache, err error) {
	defer torch.Recover(&err)
	cfg := m.Config
	shape := []int64{int64(batch), int64(cfg.NumKeyValueHeads), int64(maxLen), int64(cfg.HeadDim)}
	c = &KVCache{Max: int64(maxLen)}
	for range m.Layers {
		c.K = append(c.K, torch.Zeros(shape, m.DType, m.Device))
		c.V = append(c.V, torch.Zeros(shape, m.DType, m.Device))
	}
	return c, nil
}

// Commit marks n more positions (written by the last Forward) as context.
func (c *KVCache) Commit(n int64) error {
	if n < 0 || c.Len+n > c.Max {
		return fmt.Errorf("kv cache: cannot commit %d positions at %d of %d", n, c.Len, c.Max)
	}
	c.Len += n
	return nil
}

// Crop forgets every position from n on.
func (c *KVCache) Crop(n int64) error {
	if n < 0 || n > c.Len {
		return fmt.Errorf("kv cache: cannot crop to %d (length %d)", n, c.Len)
	}
	c.Len = n
	return nil
}

// Free releases the cache's memory.
func (c *KVCache) Free() {
	torch.Free(c.K...)
	torch.Free(c.V...)
}

// ForwardOpts configure one forward pass.
type ForwardOpts struct {
	Attention Attention
	// Cache, if set, receives the keys and values of the T input positions at
	// [Cache.Len, Cache.Len+T) and the inputs attend to everything cached
	// before them; Cache.Len itself only moves on Commit.
	Cache *KVCache
	// Mask, if set, replaces the mask Attention implies: bool (B|1, 1, T, S).
	Mask *torch.Tensor
	// Positions, if set, are the RoPE positions (T) or (B, T) of the inputs;
	// by default they are Cache.Len (or 0) onwards.
	Positions *torch.Tensor
	// LastN, if positive, computes logits only for the last LastN positions.
	LastN int
	// Split, with Mask, says that positions from Split on see none before
	// it (torch.AttnArgs.Split); attention then skips those scores.
	Split int
	// Layout, instead of Mask and Split, is training's noisy+clean block
	// layout of the inputs (torch.Layout).
	Layout *torch.Layout
}

// Forward runs ids (B, T) int64 through the model and returns logits
// (B, T', V) in the model's dtype, T' = T or LastN.
func (m *Model) Forward(ids *torch.Tensor, o ForwardOpts) (logits *torch.Tensor, err error) {
	defer torch.Recover(&err)
	h, err := m.Hidden(ids, o)
	if err != nil {
		return nil, err
	}
	defer h.Free()
	return m.Logits(h, o.LastN), nil
}

// Hidden runs the decoder layers and the final norm: hidden states
// (B, T, C) before the head.
func (m *Model) Hidden(ids *torch.Tensor, o ForwardOpts) (h *torch.Tensor, err error) {
	defer torch.Recover(&err)
	cfg := m.Config
	shape := ids.Shape()
	if len(shape) != 2 {
		return nil, fmt.Errorf("model: ids must be (B, T), got %v", shape)
	}
	T := shape[1]
	var pos int64
	if o.Cache != nil {
		pos = o.Cache.Len
		if pos+T > o.Cache.Max {
			return nil, fmt.Errorf("model: %d positions from %d exceed the KV cache of %d", T, pos, o.Cache.Max)
		}
	}
	positions := o.Positions
	if positions == nil {
		positions = torch.Arange(pos, pos+T, torch.Int64, m.Device)
		defer positions.Free()
	}
	// 1. RoPE tables for these positions, shared by every layer.
	cos, sin := torch.RopeTables(m.invFreq, positions, cfg.RopeAttentionScale(), m.DType)
	defer torch.Free(cos, sin)
	// 2. The attention mask over [0, pos+T).
	mask, causal := o.Mask, false
	if mask == nil && o.Layout == nil {
		mask, causal = m.mask(o.Attention, pos, T)
		defer mask.Free()
	}
	// 3. Embed, then the layers.
	x := torch.Embedding(m.Embed, ids) // (B, T, C)
	args := torch.AttnArgs{
		Cos: cos, Sin: sin, Mask: mask, Causal: causal,
		Heads: cfg.NumAttentionHeads, KVHeads: cfg.NumKeyValueHeads,
		Eps: cfg.RMSNormEps, Pos: pos, // Scale 0: 1/sqrt(head_dim) as HF
		Split: o.Split, Layout: o.Layout,
	}
	for i := range m.Layers {
		if o.Cache != nil {
			args.KCache, args.VCache = o.Cache.K[i], o.Cache.V[i]
		}
		a := torch.AttnBlock(x, &m.Layers[i].Attn, &args)
		x.Free()
		x = torch.MLPBlock(a, &m.Layers[i].MLP, cfg.RMSNormEps)
		a.Free()
	}
	defer x.Free()
	// 4. Final norm.
	return torch.RMSNorm(x, m.Norm, cfg.RMSNormEps), nil
}

// Logits applies the head to hidden states (B, T, C), to the last lastN
// positions only when lastN > 0.
func (m *Model) Logits(h *torch.Tensor, lastN int) *torch.Tensor {
	if T := h.Size(1); lastN > 0 && int64(lastN) < T {
		h = h.Narrow(1, T-int64(lastN), int64(lastN))
		defer h.Free()
	}
	return torch.Linear(h, m.Head, nil)
}

// mask builds the bool mask (1, 1, T, pos+T) for queries at positions
// [pos, pos+T) over keys [0, pos+T), or returns nil with causal set when the
// plain causal flag (or no mask at all) says the same.
func (m *Model) mask(a Attention, pos, T int64) (*torch.Tensor, bool) {
	S := pos + T
	switch a.Kind {
	case Causal:
		return nil, true
	case Bidirectional:
		return nil, false
	}
	B := int64(a.Block)
	if pos%B == 0 && T <= B {
		// One block (the usual decode step): it sees all context and itself.
		return nil, false
	}
	allowed := make([]bool, T*S)
	for t := int64(0); t < T; t++ {
		qb := (pos + t) / B
		for s := int64(0); s < S; s++ {
			allowed[t*S+s] = s/B <= qb
		}
	}
	cpu := torch.FromSlice(allowed, 1, 1, T, S)
	if !m.Device.CUDA {
		return cpu, false
	}
	defer cpu.Free()
	return cpu.To(torch.Bool, m.Device), false
}
