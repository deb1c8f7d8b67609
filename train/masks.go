package train

import (
	"math/rand/v2"

	"dllm/torch"
)

// The attention masks of the objectives, as row-major bool matrices
// (query, key): true = may attend. Each is a structural part, built once
// per shape, AND-ed on the device with the document mask of each sequence
// (a position attends only inside its own document).

// docIDs numbers the documents of a sequence of L tokens whose documents
// start at starts (sorted): positions before the first start continue a
// document from the previous sequence and get 0.
func docIDs(L int, starts []int) []int64 {
	ids := make([]int64, L)
	d, k := int64(0), 0
	for i := range ids {
		for k < len(starts) && starts[k] == i {
			if i > 0 || d > 0 { // a start at 0 opens document 0 itself
				d++
			}
			k++
		}
		ids[i] = d
	}
	return ids
}

// causalMask is the (T, T) mask j <= i.
func causalMask(T int) []bool {
	m := make([]bool, T*T)
	for i := 0; i < T; i++ {
		for j := 0; j <= i; j++ {
			m[i*T+j] = true
		}
	}
	return m
}

// blockLayoutMask is the (2L, 2L) mask of the noisy+clean layout, rows and
// columns [noisy 0..L-1 ; clean 0..L-1], blocks of bs aligned at 0:
//
//	clean i -> clean j   iff j <= i             (causal, as the AR model saw text)
//	noisy i -> noisy j   iff b(j) == b(i)        (the block being denoised, bidirectional)
//	noisy i -> clean j   iff b(j) <  b(i)        (all earlier context, clean)
//
// and nothing else: clean positions never see noise.
func blockLayoutMask(L, bs int) []bool {
	T := 2 * L
	m := make([]bool, T*T)
	for i := 0; i < L; i++ {
		for j := 0; j < L; j++ {
			bi, bj := i/bs, j/bs
			m[(L+i)*T+L+j] = j <= i // clean -> clean
			m[i*T+j] = bj == bi     // noisy -> noisy
			m[i*T+L+j] = bj < bi    // noisy -> clean
			m[(L+i)*T+j] = false    // clean -> noisy
		}
	}
	return m
}

// annealMask is DiffuLLaMA's (L, L) mask at density p: causal OR u < p,
// with u drawn per pair from rng.
func annealMask(rng *rand.Rand, L int, p float64) []bool {
	m := causalMask(L)
	if p <= 0 {
		return m
	}
	for i := range m {
		if !m[i] && rng.Float64() < p {
			m[i] = true
		}
	}
	return m
}

// withDocs ANDs a (T, T) structural mask (nil = all true) with the
// document mask of docs (T): the host-side reference of deviceMask.
func withDocs(base []bool, docs []int64) []bool {
	T := len(docs)
	m := make([]bool, T*T)
	for i := 0; i < T; i++ {
		for j := 0; j < T; j++ {
			m[i*T+j] = (base == nil || base[i*T+j]) && docs[i] == docs[j]
		}
	}
	return m
}

// deviceMask is the (B, 1, T, T) mask for a batch: base (1, 1, T, T) or nil
// for "all pairs", AND-ed with "same document" from docs (B, T) int64.
func deviceMask(base, docs *torch.Tensor) *torch.Tensor {
	B, T := docs.Size(0), docs.Size(1)
	q := docs.Reshape(B, 1, T, 1)
	k := docs.Reshape(B, 1, 1, T)
	defer torch.Free(q, k)
	same := q.Eq(k) // (B, 1, T, T)
	if base == nil {
		return same
	}
	defer same.Free()
	return same.And(base)
}

// predictingRow is the row of the layout whose logits predict token i of a
// sequence (L tokens, documents docs), or -1 when none may:
//
//	block, shift:    i-1 of the noisy copy, or of the clean copy (row L+i-1)
//	                 when i starts a block: exactly the AR logit the sampler
//	                 carries from the last committed block
//	block, no shift: i of the noisy copy
//	mdm:             i-1 with the shift, i without
//	ar:              i-1 (next-token prediction is the shift)
//
// With the shift, a prediction never crosses into another document: the
// first token of a document (and of the sequence) has no predicting row.
func predictingRow(objective string, shift bool, bs, i int, docs []int64) int {
	if objective == ObjectiveAR {
		shift = true
	}
	if !shift {
		return i
	}
	if i == 0 || docs[i-1] != docs[i] {
		return -1
	}
	if objective == ObjectiveBlock && i%bs == 0 {
		return len(docs) + i - 1
	}
	return i - 1
}

// tensorMask copies a host mask to dev as bool (1, 1, T, T).
func tensorMask(m []bool, T int, dev torch.Device) *torch.Tensor {
	cpu := torch.FromSlice(m, 1, 1, int64(T), int64(T))
	if !dev.CUDA {
		return cpu
	}
	defer cpu.Free()
	return cpu.To(torch.Bool, dev)
}
