// block_attn.h: attention over training's noisy+clean block layout without a
// dense mask (block_attn.cpp). Internal to the shim.
#ifndef DLLM_BLOCK_ATTN_H
#define DLLM_BLOCK_ATTN_H

#include <torch/torch.h>

#include <vector>

namespace dllm {

// BlockLayout is the plan of one micro-batch's layout: B rows of 2L
// positions, [noisy 0..L-1 ; clean 0..L-1], blocks of `block` aligned at 0,
// documents as contiguous segments of each row. Its device tensors are built
// once and read by every layer's forward and backward.
struct BlockLayout {
  int64_t B = 0, L = 0, block = 0;
  // Document segments over the B*L rows of either half: cu (nseg+1) int32
  // offsets and seg their lengths.
  at::Tensor cu;
  std::vector<int64_t> seg;
  int64_t max_seg = 0;
  // Per segment of n rows its first max(0, n - block) clean keys: the keys
  // every noisy row at least `block` further on may see. cu_k (nseg+1)
  // int32, seg_k their lengths, idx_k (total_k) int64 their packed rows.
  at::Tensor cu_k, idx_k;
  std::vector<int64_t> seg_k;
  int64_t max_k = 0, total_k = 0;
  // local (B, nb, block, 2*block) bool: noisy row r of block b over the
  // clean keys of block b-1 (first block columns) and the noisy keys of
  // block b (the rest): the part of the mask the segments above leave out.
  at::Tensor local;
};

// make_block_layout plans the layout of docs (B, L) int64 document ids
// (CPU, contiguous segments) for blocks of `block` on dev.
BlockLayout make_block_layout(const at::Tensor &docs, int64_t block, at::Device dev);

// block_layout_attention is softmax(q k^T * scale) v under the layout's mask
//   clean i -> clean j  iff j <= i,             same document
//   noisy i -> noisy j  iff block(j) == block(i), same document
//   noisy i -> clean j  iff block(j) <  block(i), same document
// for q (B, 2L, H, D), k and v (B, 2L, Hkv, D): (B, 2L, H, D), differentiable
// in q, k and v. On CUDA the two large parts are FlashAttention calls (the
// clean rows causal per document; the noisy rows over the clean keys at
// least a block back, causal with the keys shifted by a block) and the rest
// a small dense part per block, merged by log-sum-exp; elsewhere (the CPU,
// float32) the same decomposition runs on reference maths.
at::Tensor block_layout_attention(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                  const BlockLayout &lay, double scale);

} // namespace dllm

#endif
