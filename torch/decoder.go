package torch

/*
#include <stdlib.h>
#include "loader.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// DecoderLayer is one layer's weights for NewDecoder, with the projections
// that read the same input fused into one matrix each (rows stacked in HF
// order): QKV ((H+2Hkv)·D, C) with its optional bias, and gate-up (2F, C).
type DecoderLayer struct {
	AttnNorm, QKV, QKVBias, O *Tensor
	MLPNorm, GateUp, Down     *Tensor
}

// DecoderSpec describes the model a Decoder runs.
type DecoderSpec struct {
	Embed, Norm, Head *Tensor // (V, C), (C), (V, C)
	Layers            []DecoderLayer
	Heads, KVHeads    int
	Eps               float64 // RMSNorm epsilon
	Scale             float64 // attention scale; 0 means 1/sqrt(D)
	Cos, Sin          *Tensor // RoPE tables (Max, D) in the model dtype: Max bounds the context
	// Graphs > 0 captures CUDA graphs for query lengths up to Graphs (on
	// their second use); ignored on the CPU.
	Graphs int
	// NoNormFold keeps the RMSNorm kernels rather than copies of the QKV
	// and gate-up weights with the norm folded in: their size again in
	// memory (2.4 GB for MiniCPM5-2B) saved for 3-4% slower block steps.
	NoNormFold bool
	// NoPersistentKernel keeps block steps off the persistent kernel,
	// whose grid barriers need all its CTAs resident at once: for a GPU
	// shared through MPS.
	NoPersistentKernel bool
	// Seqs is how many sequences' KV caches (slots of Max positions) the
	// decoder holds, for ForwardBatch; 0 means 1. The other forwards use
	// slot 0.
	Seqs int
}

// Decoder runs a whole Llama forward for decoding (batch 1) in one shim
// call, over a KV cache it owns: the fast path of the sampler. On CUDA it
// uses FlashAttention 2 and per-layer CUDA graphs, and when the shim was
// built with nvcc its own kernels for RMSNorm, RoPE, SiLU-mul, one-row
// matmuls and attention without a mask, with one graph for a whole
// forward where that attention serves every row. It holds references to
// the weights it was given; it is not safe for concurrent use.
type Decoder struct {
	p C.dt_decoder
}

// NewDecoder builds a decoder and allocates its KV cache.
func NewDecoder(s *DecoderSpec) *Decoder {
	mustLoad()
	ws := make([]C.dt_tensor, 0, 7*len(s.Layers))
	keep := []*Tensor{s.Embed, s.Norm, s.Head, s.Cos, s.Sin}
	for _, l := range s.Layers {
		ws = append(ws, l.AttnNorm.h(), l.QKV.h(), opt(l.QKVBias), l.O.h(), l.MLPNorm.h(), l.GateUp.h(), l.Down.h())
		keep = append(keep, l.AttnNorm, l.QKV, l.QKVBias, l.O, l.MLPNorm, l.GateUp, l.Down)
	}
	if len(ws) == 0 {
		panic(&Error{Op: "decoder_new", Msg: "no layers"})
	}
	// ws is Go memory holding C pointers: copy it to C memory for the call.
	n := C.size_t(len(ws)) * C.size_t(unsafe.Sizeof(ws[0]))
	arr := (*C.dt_tensor)(C.malloc(n))
	defer C.free(unsafe.Pointer(arr))
	copy(unsafe.Slice(arr, len(ws)), ws)
	var d C.dt_decoder
	opts := 0
	if s.NoNormFold {
		opts |= C.DT_DECODER_NO_NORM_FOLD
	}
	if s.NoPersistentKernel {
		opts |= C.DT_DECODER_NO_PERSISTENT
	}
	e := C.dtl_decoder_new(s.Embed.h(), s.Norm.h(), s.Head.h(), arr, C.int(len(s.Layers)),
		C.int(s.Heads), C.int(s.KVHeads), C.double(s.Eps), C.double(s.Scale), s.Cos.h(), s.Sin.h(),
		C.int(s.Graphs), C.int(opts), C.int(max(s.Seqs, 1)), &d)
	runtime.KeepAlive(keep)
	check("decoder_new", e)
	return &Decoder{p: d}
}

// Forward runs ids at positions [pos, pos+T) after the cached [0, pos) and
// writes their keys and values at [pos, pos+T). The first causal of them
// (0 to T) attend causally, each to itself and what is before it; the
// others see all T and the cache. It returns the logits of the last rows
// positions (rows, V), or nil when rows is 0. A forward whose CUDA graphs
// are captured gets its inputs from one small kernel instead of a copy of
// the ids to the device first (an AR step's host time is part of its step).
func (d *Decoder) Forward(ids []int64, pos int64, causal, rows int) *Tensor {
	mustLoad()
	if d.p == nil {
		panic(&Error{Op: "decoder_forward", Msg: "decoder is freed"})
	}
	if len(ids) == 0 {
		panic(&Error{Op: "decoder_forward", Msg: "no input tokens"})
	}
	var out C.dt_tensor
	e := C.dtl_decoder_forward(d.p, (*C.int64_t)(unsafe.Pointer(&ids[0])), C.int64_t(len(ids)), C.int64_t(pos),
		C.int64_t(causal), C.int64_t(rows), &out)
	runtime.KeepAlive(ids)
	check("decoder_forward", e)
	if out == nil {
		return nil
	}
	return wrap(out)
}

// BatchSeq is one sequence of a ForwardBatch: its tokens, at positions
// [Pos, Pos+len(IDs)) of KV slot Slot, the first Causal of them causal;
// Rows asks for the logits of its last Rows tokens.
type BatchSeq struct {
	Slot   int
	IDs    []int64
	Pos    int64
	Causal int
	Rows   int
}

// ForwardBatch runs several sequences in one forward (continuous
// batching): the projections and the MLP over all their tokens at once,
// attention per sequence over its own slot (made with DecoderSpec.Seqs).
// It returns the requested logit rows of every sequence, stacked in order
// (sum of Rows, V), or nil when no sequence asks for any.
func (d *Decoder) ForwardBatch(seqs []BatchSeq) *Tensor {
	mustLoad()
	if d.p == nil {
		panic(&Error{Op: "decoder_forward_batch", Msg: "decoder is freed"})
	}
	if len(seqs) == 0 {
		panic(&Error{Op: "decoder_forward_batch", Msg: "an empty batch"})
	}
	var ids []int64
	slot, n, pos, causal, rows := make([]int64, len(seqs)), make([]int64, len(seqs)), make([]int64, len(seqs)),
		make([]int64, len(seqs)), make([]int64, len(seqs))
	for i, s := range seqs {
		if len(s.IDs) == 0 {
			panic(&Error{Op: "decoder_forward_batch", Msg: fmt.Sprintf("sequence %d has no tokens", i)})
		}
		ids = append(ids, s.IDs...)
		slot[i], n[i], pos[i], causal[i], rows[i] = int64(s.Slot), int64(len(s.IDs)), s.Pos, int64(s.Causal), int64(s.Rows)
	}
	// The arrays are Go memory without Go pointers: the shim reads them
	// during the call only.
	p64 := func(v []int64) *C.int64_t { return (*C.int64_t)(unsafe.Pointer(&v[0])) }
	var out C.dt_tensor
	e := C.dtl_decoder_forward_batch(d.p, p64(ids), C.int(len(seqs)), p64(slot), p64(n), p64(pos), p64(causal), p64(rows), &out)
	runtime.KeepAlive(ids)
	runtime.KeepAlive([][]int64{slot, n, pos, causal, rows})
	check("decoder_forward_batch", e)
	if out == nil {
		return nil
	}
	return wrap(out)
}

// ForwardNext queues the next denoising forward of a fixed-commit block
// of n tokens at pos before the host has read the picks of the forward
// before it (the last one, whose last n ids are the block's canvas): on
// the device, the k most probable masked positions of that canvas (ids
// equal to mask; position 0 first with shift; the first on a tie) take
// their picks (picks: (2n) float64 on the device, probabilities then ids,
// as PickGreedy gives), and the forward runs on the result with no
// causal rows. It returns the logits of its last rows positions and true,
// or false with nothing queued where it cannot (no CUDA graph for this
// forward, or the last one ran without one): call Forward then.
func (d *Decoder) ForwardNext(n int, pos int64, picks *Tensor, mask int64, k int, shift bool, rows int) (*Tensor, bool) {
	mustLoad()
	if d.p == nil {
		panic(&Error{Op: "decoder_forward_next", Msg: "decoder is freed"})
	}
	var out C.dt_tensor
	var ok C.int
	sh := C.int(0)
	if shift {
		sh = 1
	}
	check("decoder_forward_next", C.dtl_decoder_forward_next(d.p, C.int64_t(n), C.int64_t(pos), picks.h(),
		C.int64_t(mask), C.int64_t(k), sh, C.int64_t(rows), &ok, &out))
	runtime.KeepAlive(picks)
	if ok == 0 {
		return nil, false
	}
	if out == nil {
		return nil, true
	}
	return wrap(out), true
}

// Prepare captures, ahead of use, the CUDA graphs of block steps of n
// tokens whose attention runs through cuDNN, and of fused commits (2 n
// tokens, n causal): one of each per context
// bucket up to upto positions, each of which would otherwise cost its
// first forwards ~80 ms (cuDNN plans every new shape). It returns how many
// it captured: 0 off the GPU or below the contexts that path serves
// (past 1024 keys). It writes the cache at positions [0, 2 n): call it
// between sequences.
func (d *Decoder) Prepare(n, upto int64) int {
	mustLoad()
	if d.p == nil {
		panic(&Error{Op: "decoder_prepare", Msg: "decoder is freed"})
	}
	var captured C.int64_t
	check("decoder_prepare", C.dtl_decoder_prepare(d.p, C.int64_t(n), C.int64_t(upto), &captured))
	return int(captured)
}

// Graphs is the number of CUDA graphs captured so far.
func (d *Decoder) Graphs() int { return int(C.dtl_decoder_graphs(d.p)) }

// Free releases the KV cache and graphs (the weights live on with their
// other owners). Freeing twice is harmless.
func (d *Decoder) Free() {
	if d == nil || d.p == nil {
		return
	}
	C.dtl_decoder_free(d.p)
	d.p = nil
}
