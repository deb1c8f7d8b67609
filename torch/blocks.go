package torch

/*
#include "loader.h"
*/
import "C"

import "runtime"

// AttnWeights are one Llama layer's attention parameters (HF layout: each
// projection is (out, in); biases are nil unless the model has them).
type AttnWeights struct {
	Norm, Q, K, V, O *Tensor
	BQ, BK, BV       *Tensor
}

// AttnArgs configure one call of AttnBlock.
type AttnArgs struct {
	Cos, Sin       *Tensor // RoPE tables (T, D) or (B, T, D)
	Mask           *Tensor // nil or bool (B|1, 1, T, S)
	Causal         bool    // lower-right aligned causal mask (without Mask)
	Heads, KVHeads int
	Eps            float64 // RMSNorm epsilon
	Scale          float64 // attention scale; 0 means 1/sqrt(D)
	KCache, VCache *Tensor // nil, or (B, Hkv, Tmax, D) written at Pos
	Pos            int64   // cache slot of the first of the T new tokens
	Impl           AttnImpl
	// Split > 0 (with Mask, without a cache) says that queries from Split
	// on see no key before Split (training's noisy+clean layout: the clean
	// half never sees the noise); attention then skips those scores. The
	// result is the same.
	Split int
	// Layout, when set (without Mask, cache, Split or Causal), is the
	// noisy+clean block layout of x: attention follows its mask without
	// building it, through FlashAttention on CUDA.
	Layout *Layout
}

// Layout is the plan of a micro-batch's noisy+clean block layout
// (training's block objective) for AttnBlock: B rows of 2L positions,
// [noisy ; clean], where
//
//	clean i -> clean j  iff j <= i
//	noisy i -> noisy j  iff block(j) == block(i)
//	noisy i -> clean j  iff block(j) <  block(i)
//
// all inside one document. It must outlive the backward passes of the
// blocks that use it.
type Layout struct {
	p C.dt_layout
}

// NewLayout plans the layout for docs (B, L) int64 on the CPU, the document
// id of each position (documents contiguous), and blocks of block aligned
// at 0, with its tensors on dev.
func NewLayout(docs *Tensor, block int, dev Device) *Layout {
	mustLoad()
	dt, di := dev.c()
	var l C.dt_layout
	e := C.dtl_layout_new(docs.h(), C.int64_t(block), dt, di, &l)
	runtime.KeepAlive(docs)
	check("layout_new", e)
	return &Layout{p: l}
}

// Free releases the layout; freeing nil or twice is harmless.
func (l *Layout) Free() {
	if l == nil || l.p == nil {
		return
	}
	C.dtl_layout_free(l.p)
	l.p = nil
}

func (l *Layout) c() C.dt_layout {
	if l == nil {
		return nil
	}
	return l.p
}

// AttnBlock is a Llama pre-norm attention sublayer in one shim call:
// x + Wo·attn(rope(Wq·h), rope(Wk·h), Wv·h) with h = RMSNorm(x), x (B, T, C).
// With a cache, the T new keys and values are written to slots
// [Pos, Pos+T) and the queries attend to slots [0, Pos+T).
func AttnBlock(x *Tensor, w *AttnWeights, a *AttnArgs) *Tensor {
	return call("attn_block", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_attn_block(x.h(), w.Norm.h(), w.Q.h(), w.K.h(), w.V.h(), w.O.h(),
			opt(w.BQ), opt(w.BK), opt(w.BV), a.Cos.h(), a.Sin.h(), opt(a.Mask), cbool(a.Causal),
			C.int(a.Heads), C.int(a.KVHeads), C.double(a.Eps), C.double(a.Scale),
			opt(a.KCache), opt(a.VCache), C.int64_t(a.Pos), C.int(a.Impl), C.int64_t(a.Split), a.Layout.c(), out)
	}, x, w.Norm, w.Q, w.K, w.V, w.O, w.BQ, w.BK, w.BV, a.Cos, a.Sin, a.Mask, a.KCache, a.VCache)
}

// MLPWeights are one Llama layer's MLP parameters (HF layout).
type MLPWeights struct {
	Norm, Gate, Up, Down *Tensor
}

// MLPBlock is x + W_down(silu(W_gate·h) * W_up·h) with h = RMSNorm(x).
func MLPBlock(x *Tensor, w *MLPWeights, eps float64) *Tensor {
	return call("mlp_block", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_mlp_block(x.h(), w.Norm.h(), w.Gate.h(), w.Up.h(), w.Down.h(), C.double(eps), out)
	}, x, w.Norm, w.Gate, w.Up, w.Down)
}
