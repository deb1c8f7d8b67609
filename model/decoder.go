package model

import (
	"fmt"
	"time"

	"dllm/torch"
)

// Decoder is the model's fast forward for decoding (torch.Decoder: the whole
// forward in one shim call, FlashAttention and CUDA graphs on a GPU) with
// its KV cache's bookkeeping. It gives the same logits as Forward over a
// KVCache up to rounding. Batch 1; not safe for concurrent use.
type Decoder struct {
	m   *Model
	d   *torch.Decoder
	Len int64 // positions [0, Len) hold committed context
	Max int64
	// Host is the time spent inside Forward, in total. On a GPU the work
	// only gets enqueued there, so a Host close to the wall time of the
	// forwards says the CPU, not the GPU, sets the pace.
	Host time.Duration
}

// NewDecoder builds a decoder whose KV cache holds maxLen positions;
// graphs > 0 lets it capture CUDA graphs for forwards of up to graphs
// tokens. The first call fuses the model's projections (see fuse).
func (m *Model) NewDecoder(maxLen, graphs int) (d *Decoder, err error) {
	defer torch.Recover(&err)
	if maxLen < 1 {
		return nil, fmt.Errorf("decoder: context of %d positions", maxLen)
	}
	m.fuse()
	positions := torch.Arange(0, int64(maxLen), torch.Int64, m.Device)
	defer positions.Free()
	cos, sin := torch.RopeTables(m.invFreq, positions, m.Config.RopeAttentionScale(), m.DType)
	defer torch.Free(cos, sin)
	return &Decoder{m: m, d: torch.NewDecoder(m.decoderSpec(cos, sin, graphs)), Max: int64(maxLen)}, nil
}

// decoderSpec is the decoder of the fused model over RoPE tables cos, sin.
func (m *Model) decoderSpec(cos, sin *torch.Tensor, graphs int) *torch.DecoderSpec {
	cfg := m.Config
	spec := &torch.DecoderSpec{
		Embed: m.Embed, Norm: m.Norm, Head: m.Head,
		Heads: cfg.NumAttentionHeads, KVHeads: cfg.NumKeyValueHeads,
		Eps: cfg.RMSNormEps, Cos: cos, Sin: sin, Graphs: graphs,
		NoNormFold: m.NoNormFold, NoPersistentKernel: m.NoPersistentKernel,
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		spec.Layers = append(spec.Layers, torch.DecoderLayer{
			AttnNorm: l.Attn.Norm, QKV: l.qkv, QKVBias: l.bqkv, O: l.Attn.O,
			MLPNorm: l.MLP.Norm, GateUp: l.gateUp, Down: l.MLP.Down,
		})
	}
	return spec
}

// fuse stacks each layer's Q, K and V weights (and biases) into one matrix
// and gate and up into another, so a decoder reads its input once per
// group; the model's own Q, K, V, Gate and Up become views of the stacked
// matrices, so the weights are not held twice. It runs once per model.
func (m *Model) fuse() {
	for i := range m.Layers {
		l := &m.Layers[i]
		if l.qkv != nil {
			continue
		}
		a, f := &l.Attn, &l.MLP
		l.qkv = stack(&a.Q, &a.K, &a.V)
		if a.BQ != nil {
			l.bqkv = stack(&a.BQ, &a.BK, &a.BV)
		}
		l.gateUp = stack(&f.Gate, &f.Up)
	}
}

// stack concatenates the tensors along dim 0 and replaces each with its
// view of the result.
func stack(ts ...**torch.Tensor) *torch.Tensor {
	parts := make([]*torch.Tensor, len(ts))
	for i, t := range ts {
		parts[i] = *t
	}
	all := torch.Cat(0, parts...)
	var at int64
	for _, t := range ts {
		n := (*t).Size(0)
		(*t).Free()
		*t = all.Narrow(0, at, n)
		at += n
	}
	return all
}

// Forward runs ids after the committed context, writing their keys and
// values at [Len, Len+len(ids)) (Len moves only on Commit), and returns
// the logits of the last rows positions (rows, V), or nil for rows 0. The
// first causal ids (0 to len(ids)) attend causally; the others see all the
// ids and the context: a block being denoised, after (or without) a block
// being committed.
func (d *Decoder) Forward(ids []int64, causal, rows int) (logits *torch.Tensor, err error) {
	defer torch.Recover(&err)
	T := int64(len(ids))
	if T == 0 || d.Len+T > d.Max {
		return nil, fmt.Errorf("decoder: %d positions from %d exceed the KV cache of %d", T, d.Len, d.Max)
	}
	if causal < 0 || causal > len(ids) || rows < 0 || rows > len(ids) {
		return nil, fmt.Errorf("decoder: %d causal positions and %d logit rows of %d", causal, rows, len(ids))
	}
	defer func(t0 time.Time) { d.Host += time.Since(t0) }(time.Now())
	return d.d.Forward(ids, d.Len, causal, rows), nil
}

// ForwardNext queues the next denoising step of a fixed-commit block of n
// tokens, its canvas made on the device from the last forward's (its last
// n ids) and that forward's picks (see torch.Decoder.ForwardNext), so that
// the host need not read the picks first. ok false: nothing was queued
// (call Forward with the canvas).
func (d *Decoder) ForwardNext(n int, picks *torch.Tensor, mask int64, k int, shift bool, rows int) (logits *torch.Tensor, ok bool, err error) {
	defer torch.Recover(&err)
	if n < 1 || d.Len+int64(n) > d.Max {
		return nil, false, fmt.Errorf("decoder: %d positions from %d exceed the KV cache of %d", n, d.Len, d.Max)
	}
	if k < 1 || rows < 0 || rows > n {
		return nil, false, fmt.Errorf("decoder: a next step committing %d with %d logit rows of %d", k, rows, n)
	}
	defer func(t0 time.Time) { d.Host += time.Since(t0) }(time.Now())
	logits, ok = d.d.ForwardNext(n, d.Len, picks, mask, k, shift, rows)
	return logits, ok, nil
}

// Commit marks n more positions (written by the last Forward) as context.
func (d *Decoder) Commit(n int64) error {
	if n < 0 || d.Len+n > d.Max {
		return fmt.Errorf("decoder: cannot commit %d positions at %d of %d", n, d.Len, d.Max)
	}
	d.Len += n
	return nil
}

// Reset forgets the context: the next Forward starts at position 0.
func (d *Decoder) Reset() { d.Len = 0 }

// Prepare captures, ahead of use, the CUDA graphs of block steps of block
// tokens, and of fused commits (2 block tokens), at the contexts up to
// upto whose attention runs through cuDNN, one of each per 2048
// positions, each of which would cost a generation ~80 ms where it first
// reaches it (torch.Decoder.Prepare). It returns how many
// it captured: 0 off the GPU and below the contexts that path serves. It
// forgets the context (Reset): it writes the cache's first positions.
func (d *Decoder) Prepare(block, upto int) (n int, err error) {
	defer torch.Recover(&err)
	if block < 1 {
		return 0, fmt.Errorf("decoder: block of %d tokens", block)
	}
	d.Reset()
	return d.d.Prepare(int64(block), min(int64(upto), d.Max)), nil
}

// Graphs is the number of CUDA graphs captured so far.
func (d *Decoder) Graphs() int { return d.d.Graphs() }

// Free releases the KV cache and the graphs; a nil Decoder is fine.
func (d *Decoder) Free() {
	if d != nil {
		d.d.Free()
	}
}

// BatchDecoder runs several sequences in one forward (continuous
// batching) over a KV cache of Seqs slots of Max positions each
// (torch.Decoder.ForwardBatch). It keeps no positions of its own: the
// caller says where each sequence stands. Not safe for concurrent use.
type BatchDecoder struct {
	d         *torch.Decoder
	Max, Seqs int64
}

// NewBatchDecoder builds a batch decoder whose KV cache holds seqs
// sequences of up to maxLen positions, with graphs as NewDecoder's for
// ForwardOne.
func (m *Model) NewBatchDecoder(maxLen, seqs, graphs int) (d *BatchDecoder, err error) {
	defer torch.Recover(&err)
	if maxLen < 1 || seqs < 1 {
		return nil, fmt.Errorf("decoder: %d sequences of %d positions", seqs, maxLen)
	}
	m.fuse()
	positions := torch.Arange(0, int64(maxLen), torch.Int64, m.Device)
	defer positions.Free()
	cos, sin := torch.RopeTables(m.invFreq, positions, m.Config.RopeAttentionScale(), m.DType)
	defer torch.Free(cos, sin)
	spec := m.decoderSpec(cos, sin, graphs)
	spec.Seqs = seqs
	return &BatchDecoder{d: torch.NewDecoder(spec), Max: int64(maxLen), Seqs: int64(seqs)}, nil
}

// Forward runs seqs (each within its slot's Max positions) and returns
// their requested logit rows stacked in order, or nil for none.
func (d *BatchDecoder) Forward(seqs []torch.BatchSeq) (logits *torch.Tensor, err error) {
	defer torch.Recover(&err)
	for i, s := range seqs {
		if err := d.check(s, d.Seqs); err != nil {
			return nil, fmt.Errorf("batch sequence %d: %w", i, err)
		}
	}
	return d.d.ForwardBatch(seqs), nil
}

// check says what is wrong with s for a decoder whose first slots slots
// it may use, if anything.
func (d *BatchDecoder) check(s torch.BatchSeq, slots int64) error {
	if s.Slot < 0 || int64(s.Slot) >= slots || len(s.IDs) == 0 || s.Pos < 0 || s.Pos+int64(len(s.IDs)) > d.Max ||
		s.Causal < 0 || s.Causal > len(s.IDs) || s.Rows < 0 || s.Rows > len(s.IDs) {
		return fmt.Errorf("decoder: slot %d of %d, %d tokens at %d (%d causal, %d rows), context %d",
			s.Slot, slots, len(s.IDs), s.Pos, s.Causal, s.Rows, d.Max)
	}
	return nil
}

// ForwardOne runs s, a sequence of slot 0, alone through the
// single-stream decoder (Decoder.Forward's path: on a GPU its fused
// forward and CUDA graphs, which a batch does not have): what Forward
// gives for a batch of s alone, up to rounding, faster.
func (d *BatchDecoder) ForwardOne(s torch.BatchSeq) (logits *torch.Tensor, err error) {
	defer torch.Recover(&err)
	if err := d.check(s, 1); err != nil {
		return nil, fmt.Errorf("a sequence alone: %w", err)
	}
	return d.d.Forward(s.IDs, s.Pos, s.Causal, s.Rows), nil
}

// ForwardNextOne is Decoder.ForwardNext for the sequence alone in slot 0
// whose last forward was ForwardOne: the next denoising forward of its
// fixed-commit block of n tokens at pos, its canvas made on the device
// from that forward's inputs and picks (n rows of logits). ok false:
// nothing was queued (off the GPU, or the last forward was another).
func (d *BatchDecoder) ForwardNextOne(n int, pos int64, picks *torch.Tensor, mask int64, k int, shift bool) (logits *torch.Tensor, ok bool, err error) {
	defer torch.Recover(&err)
	if n < 1 || k < 1 || pos < 0 || pos+int64(n) > d.Max {
		return nil, false, fmt.Errorf("decoder: a next step of %d positions at %d committing %d, context %d", n, pos, k, d.Max)
	}
	logits, ok = d.d.ForwardNext(n, pos, picks, mask, k, shift, n)
	return logits, ok, nil
}

// Prepare makes ForwardOne's CUDA graphs for blocks of block tokens over
// the whole context now (Decoder.Prepare); it runs forwards in slot 0, so
// it must come before any sequence uses the decoder.
func (d *BatchDecoder) Prepare(block int) (n int, err error) {
	defer torch.Recover(&err)
	if block < 1 {
		return 0, fmt.Errorf("decoder: block of %d tokens", block)
	}
	return d.d.Prepare(int64(block), d.Max), nil
}

// Free releases the decoder and its KV cache.
func (d *BatchDecoder) Free() {
	if d != nil && d.d != nil {
		d.d.Free()
		d.d = nil
	}
}
