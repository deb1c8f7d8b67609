// Package train continues the training of a converted AR checkpoint as a
// block-diffusion language model (docs/training.md).
//
// The loop is deliberately plain, nanoGPT style: draw micro-batches, noise
// them in Go, run the model in the noisy+clean layout, take a weighted
// cross-entropy on the masked positions, accumulate gradients, clip, step
// AdamW, checkpoint. Objectives:
//
//   - block: the sampler's situation. Input (B, 2L) = [noisy ; clean]; the
//     clean copy is causal, each noisy block sees itself bidirectionally and
//     the clean copy of every earlier block (SDAR / Fast-dLLM v2).
//   - ar: plain next-token prediction on the clean sequence (the baseline).
//   - mdm: full-sequence masked diffusion with bidirectional attention inside
//     each document, optionally annealed from causal (DiffuLLaMA).
//
// Optionally (distill.weight > 0, distill.go) a frozen AR teacher reads the
// clean sequences causally and its next-token distributions are soft
// targets for the masked positions: a KL term beside the cross-entropy.
//
// All randomness that shapes a batch (data order, noise levels, masks) comes
// from Go's PCG generators, whose state is saved in checkpoints, so a resumed
// run is bit-identical to an uninterrupted one.
package train
