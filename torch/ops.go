package torch

/*
#include "loader.h"
*/
import "C"

import "runtime"

func (t *Tensor) unary(op C.int, name string) *Tensor {
	return call(name, func(out *C.dt_tensor) C.dt_err { return C.dtl_unary(op, t.h(), out) }, t)
}

// Neg is -t.
func (t *Tensor) Neg() *Tensor { return t.unary(C.DT_NEG, "neg") }

// Exp is e^t.
func (t *Tensor) Exp() *Tensor { return t.unary(C.DT_EXP, "exp") }

// Log is the natural logarithm.
func (t *Tensor) Log() *Tensor { return t.unary(C.DT_LOG, "log") }

// Sqrt is the square root.
func (t *Tensor) Sqrt() *Tensor { return t.unary(C.DT_SQRT, "sqrt") }

// Rsqrt is 1/sqrt(t).
func (t *Tensor) Rsqrt() *Tensor { return t.unary(C.DT_RSQRT, "rsqrt") }

// Silu is t*sigmoid(t).
func (t *Tensor) Silu() *Tensor { return t.unary(C.DT_SILU, "silu") }

// Sigmoid is 1/(1+e^-t).
func (t *Tensor) Sigmoid() *Tensor { return t.unary(C.DT_SIGMOID, "sigmoid") }

// Tanh is the hyperbolic tangent.
func (t *Tensor) Tanh() *Tensor { return t.unary(C.DT_TANH, "tanh") }

// Abs is |t|.
func (t *Tensor) Abs() *Tensor { return t.unary(C.DT_ABS, "abs") }

// Cos is the cosine.
func (t *Tensor) Cos() *Tensor { return t.unary(C.DT_COS, "cos") }

// Sin is the sine.
func (t *Tensor) Sin() *Tensor { return t.unary(C.DT_SIN, "sin") }

// Relu is max(t, 0).
func (t *Tensor) Relu() *Tensor { return t.unary(C.DT_RELU, "relu") }

// Not is the logical negation of a bool tensor.
func (t *Tensor) Not() *Tensor { return t.unary(C.DT_LOGICAL_NOT, "logical_not") }

func (t *Tensor) binary(op C.int, name string, u *Tensor) *Tensor {
	return call(name, func(out *C.dt_tensor) C.dt_err { return C.dtl_binary(op, t.h(), u.h(), out) }, t, u)
}

func (t *Tensor) scalar(op C.int, name string, s float64) *Tensor {
	return call(name, func(out *C.dt_tensor) C.dt_err {
		return C.dtl_binary_scalar(op, t.h(), C.double(s), out)
	}, t)
}

// Add is t+u (broadcasting).
func (t *Tensor) Add(u *Tensor) *Tensor { return t.binary(C.DT_ADD, "add", u) }

// Sub is t-u.
func (t *Tensor) Sub(u *Tensor) *Tensor { return t.binary(C.DT_SUB, "sub", u) }

// Mul is t*u elementwise.
func (t *Tensor) Mul(u *Tensor) *Tensor { return t.binary(C.DT_MUL, "mul", u) }

// Div is t/u.
func (t *Tensor) Div(u *Tensor) *Tensor { return t.binary(C.DT_DIV, "div", u) }

// Pow is t^u.
func (t *Tensor) Pow(u *Tensor) *Tensor { return t.binary(C.DT_POW, "pow", u) }

// Maximum is the elementwise max.
func (t *Tensor) Maximum(u *Tensor) *Tensor { return t.binary(C.DT_MAXIMUM, "maximum", u) }

// Minimum is the elementwise min.
func (t *Tensor) Minimum(u *Tensor) *Tensor { return t.binary(C.DT_MINIMUM, "minimum", u) }

// Eq is t == u as bool.
func (t *Tensor) Eq(u *Tensor) *Tensor { return t.binary(C.DT_EQ, "eq", u) }

// Ne is t != u.
func (t *Tensor) Ne(u *Tensor) *Tensor { return t.binary(C.DT_NE, "ne", u) }

// Lt is t < u.
func (t *Tensor) Lt(u *Tensor) *Tensor { return t.binary(C.DT_LT, "lt", u) }

// Le is t <= u.
func (t *Tensor) Le(u *Tensor) *Tensor { return t.binary(C.DT_LE, "le", u) }

// Gt is t > u.
func (t *Tensor) Gt(u *Tensor) *Tensor { return t.binary(C.DT_GT, "gt", u) }

// Ge is t >= u.
func (t *Tensor) Ge(u *Tensor) *Tensor { return t.binary(C.DT_GE, "ge", u) }

// And is the logical and of bool tensors.
func (t *Tensor) And(u *Tensor) *Tensor { return t.binary(C.DT_LOGICAL_AND, "logical_and", u) }

// Or is the logical or of bool tensors.
func (t *Tensor) Or(u *Tensor) *Tensor { return t.binary(C.DT_LOGICAL_OR, "logical_or", u) }

// AddScalar is t+s.
func (t *Tensor) AddScalar(s float64) *Tensor { return t.scalar(C.DT_ADD, "add", s) }

// MulScalar is t*s.
func (t *Tensor) MulScalar(s float64) *Tensor { return t.scalar(C.DT_MUL, "mul", s) }

// DivScalar is t/s.
func (t *Tensor) DivScalar(s float64) *Tensor { return t.scalar(C.DT_DIV, "div", s) }

// PowScalar is t^s.
func (t *Tensor) PowScalar(s float64) *Tensor { return t.scalar(C.DT_POW, "pow", s) }

// ClampMin is max(t, s).
func (t *Tensor) ClampMin(s float64) *Tensor { return t.scalar(C.DT_MAXIMUM, "clamp_min", s) }

// ClampMax is min(t, s).
func (t *Tensor) ClampMax(s float64) *Tensor { return t.scalar(C.DT_MINIMUM, "clamp_max", s) }

// EqScalar is t == s.
func (t *Tensor) EqScalar(s float64) *Tensor { return t.scalar(C.DT_EQ, "eq", s) }

// GeScalar is t >= s.
func (t *Tensor) GeScalar(s float64) *Tensor { return t.scalar(C.DT_GE, "ge", s) }

// LtScalar is t < s.
func (t *Tensor) LtScalar(s float64) *Tensor { return t.scalar(C.DT_LT, "lt", s) }

func (t *Tensor) reduce(op C.int, name string, dim int, keep bool) *Tensor {
	return call(name, func(out *C.dt_tensor) C.dt_err {
		return C.dtl_reduce(op, t.h(), C.int64_t(dim), cbool(keep), out)
	}, t)
}

// Sum sums over dim.
func (t *Tensor) Sum(dim int, keep bool) *Tensor { return t.reduce(C.DT_SUM, "sum", dim, keep) }

// Mean averages over dim.
func (t *Tensor) Mean(dim int, keep bool) *Tensor { return t.reduce(C.DT_MEAN, "mean", dim, keep) }

// Max is the maximum over dim.
func (t *Tensor) Max(dim int, keep bool) *Tensor { return t.reduce(C.DT_MAX, "max", dim, keep) }

// Min is the minimum over dim.
func (t *Tensor) Min(dim int, keep bool) *Tensor { return t.reduce(C.DT_MIN, "min", dim, keep) }

// Argmax is the index of the maximum over dim (int64).
func (t *Tensor) Argmax(dim int, keep bool) *Tensor {
	return t.reduce(C.DT_ARGMAX, "argmax", dim, keep)
}

// Argmin is the index of the minimum over dim.
func (t *Tensor) Argmin(dim int, keep bool) *Tensor {
	return t.reduce(C.DT_ARGMIN, "argmin", dim, keep)
}

// LogSumExp is log(sum(exp(t))) over dim, computed stably.
func (t *Tensor) LogSumExp(dim int, keep bool) *Tensor {
	return t.reduce(C.DT_LOGSUMEXP, "logsumexp", dim, keep)
}

// PickGreedy is the sampler's greedy choice for each row of logits (n, V):
// the first index of the row's largest value (column mask left out when
// mask >= 0) and its softmax probability in float32, returned as (2n)
// float64 on the logits' device, [p_0 .. p_n-1, id_0 .. id_n-1]. On CUDA
// it is one kernel instead of a float32 copy and four reductions.
func PickGreedy(logits *Tensor, mask int64) *Tensor {
	return call("pick_greedy", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_pick_greedy(logits.h(), C.int64_t(mask), out)
	}, logits)
}

// PickGreedyAfter is PickGreedy of first (1, V) and logits (n, V) stacked,
// without the copy that stacking them takes: (2n+2), row 0 first's.
func PickGreedyAfter(first, logits *Tensor, mask int64) *Tensor {
	return call("pick_greedy", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_pick_greedy_after(first.h(), logits.h(), C.int64_t(mask), out)
	}, first, logits)
}

// SumAll is the sum of every element (0-d).
func (t *Tensor) SumAll() *Tensor {
	return call("sum", func(out *C.dt_tensor) C.dt_err { return C.dtl_reduce_all(C.DT_SUM, t.h(), out) }, t)
}

// MeanAll is the mean of every element (0-d).
func (t *Tensor) MeanAll() *Tensor {
	return call("mean", func(out *C.dt_tensor) C.dt_err { return C.dtl_reduce_all(C.DT_MEAN, t.h(), out) }, t)
}

// Matmul is the matrix product with numpy-style batching.
func (t *Tensor) Matmul(u *Tensor) *Tensor {
	return call("matmul", func(out *C.dt_tensor) C.dt_err { return C.dtl_matmul(t.h(), u.h(), out) }, t, u)
}

// Linear is x @ w^T + b for w (out, in); b may be nil.
func Linear(x, w, b *Tensor) *Tensor {
	return call("linear", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_linear(x.h(), w.h(), opt(b), out)
	}, x, w, b)
}

// Embedding looks up rows of weight (V, C) for integer ids.
func Embedding(weight, ids *Tensor) *Tensor {
	return call("embedding", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_embedding(weight.h(), ids.h(), out)
	}, weight, ids)
}

// Softmax normalises exp(t) over dim.
func (t *Tensor) Softmax(dim int) *Tensor {
	return call("softmax", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_softmax(t.h(), C.int64_t(dim), 0, out)
	}, t)
}

// LogSoftmax is log(softmax(t)) computed stably.
func (t *Tensor) LogSoftmax(dim int) *Tensor {
	return call("log_softmax", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_softmax(t.h(), C.int64_t(dim), 1, out)
	}, t)
}

// Cumsum is the inclusive cumulative sum of t along dim.
func (t *Tensor) Cumsum(dim int) *Tensor {
	return call("cumsum", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_cumsum(t.h(), C.int64_t(dim), out)
	}, t)
}

// RMSNorm is w * x/sqrt(mean(x^2)+eps) over the last dim, normalised in
// float32 and cast back before the scale, as HF's LlamaRMSNorm does.
func RMSNorm(x, w *Tensor, eps float64) *Tensor {
	return call("rms_norm", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_rms_norm(x.h(), w.h(), C.double(eps), out)
	}, x, w)
}

// RopeTables computes cos and sin (..., T, D) for positions (T) or (B, T) from
// the inverse frequencies (D/2): angles in float32, multiplied by scale, cast
// to dtype.
func RopeTables(invFreq, positions *Tensor, scale float64, dtype DType) (cos, sin *Tensor) {
	mustLoad()
	var c, s C.dt_tensor
	e := C.dtl_rope_tables(invFreq.h(), positions.h(), C.double(scale), C.int(dtype), &c, &s)
	runtime.KeepAlive(invFreq)
	runtime.KeepAlive(positions)
	check("rope_tables", e)
	return wrap(c), wrap(s)
}

// Rope rotates x (B, H, T, D) by the angles in cos/sin (T, D) or (B, T, D),
// in HF's rotate_half layout.
func Rope(x, cos, sin *Tensor) *Tensor {
	return call("rope", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_rope(x.h(), cos.h(), sin.h(), out)
	}, x, cos, sin)
}

// AttnImpl picks the attention kernel.
type AttnImpl int

// Attention kernels: AttnAuto is libtorch's fused SDPA where the version has
// one (2.0 and later) and AttnMath otherwise; AttnMath is always the explicit
// softmax(QK^T/sqrt(D))V with a float32 softmax.
const (
	AttnAuto AttnImpl = C.DT_ATTN_AUTO
	AttnMath AttnImpl = C.DT_ATTN_MATH
)

// AttnOpts are the optional parts of an attention call.
type AttnOpts struct {
	Mask   *Tensor  // bool, broadcastable to (B, H, T, S); true = may attend
	Causal bool     // query t sees keys up to S-T+t (only without Mask)
	Scale  float64  // 0 means 1/sqrt(D)
	Impl   AttnImpl // kernel choice
}

// SDPA is attention for q (B, H, T, D) over k, v (B, Hkv, S, D) with H a
// multiple of Hkv (grouped queries).
func SDPA(q, k, v *Tensor, o AttnOpts) *Tensor {
	return call("sdpa", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_sdpa(q.h(), k.h(), v.h(), opt(o.Mask), cbool(o.Causal), C.double(o.Scale), C.int(o.Impl), out)
	}, q, k, v, o.Mask)
}

// Reduction says how per-element losses are combined.
type Reduction int

// Reductions for CrossEntropy.
const (
	ReduceNone Reduction = 0
	ReduceMean Reduction = 1
	ReduceSum  Reduction = 2
)

// CrossEntropy of logits (N, V) against int64 targets (N); targets equal to
// ignoreIndex contribute nothing (and are not counted by the mean).
func CrossEntropy(logits, targets *Tensor, ignoreIndex int64, r Reduction) *Tensor {
	return call("cross_entropy", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_cross_entropy(logits.h(), targets.h(), C.int64_t(ignoreIndex), C.int(r), out)
	}, logits, targets)
}

// TopK is the k largest values along dim and their indices, largest first.
func (t *Tensor) TopK(k int, dim int) (values, indices *Tensor) {
	mustLoad()
	var v, i C.dt_tensor
	e := C.dtl_topk(t.h(), C.int64_t(k), C.int64_t(dim), &v, &i)
	runtime.KeepAlive(t)
	check("topk", e)
	return wrap(v), wrap(i)
}

// Multinomial samples n indices per row of probs (R, V) or (V).
func (t *Tensor) Multinomial(n int, replacement bool) *Tensor {
	return call("multinomial", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_multinomial(t.h(), C.int64_t(n), cbool(replacement), out)
	}, t)
}

// Reshape is t with a new shape (-1 infers one size); a view when possible.
func (t *Tensor) Reshape(shape ...int64) *Tensor {
	s, n := shapeArg(shape)
	return call("reshape", func(out *C.dt_tensor) C.dt_err { return C.dtl_reshape(t.h(), s, n, out) }, t)
}

// Permute reorders dimensions.
func (t *Tensor) Permute(dims ...int64) *Tensor {
	s, n := shapeArg(dims)
	return call("permute", func(out *C.dt_tensor) C.dt_err { return C.dtl_permute(t.h(), s, n, out) }, t)
}

// Transpose swaps two dimensions.
func (t *Tensor) Transpose(d0, d1 int) *Tensor {
	return call("transpose", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_transpose(t.h(), C.int64_t(d0), C.int64_t(d1), out)
	}, t)
}

// Narrow is the view of length n starting at start along dim.
func (t *Tensor) Narrow(dim int, start, n int64) *Tensor {
	return call("narrow", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_narrow(t.h(), C.int64_t(dim), C.int64_t(start), C.int64_t(n), out)
	}, t)
}

// Expand broadcasts size-1 dimensions to shape (-1 keeps a size); a view.
func (t *Tensor) Expand(shape ...int64) *Tensor {
	s, n := shapeArg(shape)
	return call("expand", func(out *C.dt_tensor) C.dt_err { return C.dtl_expand(t.h(), s, n, out) }, t)
}

// Cat concatenates tensors along dim.
func Cat(dim int, ts ...*Tensor) *Tensor {
	hs, free := handles(ts)
	defer free()
	return call("cat", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_cat(hs, C.int(len(ts)), C.int64_t(dim), out)
	}, ts...)
}

// IndexSelect picks the entries of index (int64, 1-d) along dim.
func (t *Tensor) IndexSelect(dim int, index *Tensor) *Tensor {
	return call("index_select", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_index_select(t.h(), C.int64_t(dim), index.h(), out)
	}, t, index)
}

// Gather picks t[..., index[...], ...] along dim, index shaped like the output.
func (t *Tensor) Gather(dim int, index *Tensor) *Tensor {
	return call("gather", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_gather(t.h(), C.int64_t(dim), index.h(), out)
	}, t, index)
}

// IndexPut sets t[index] = values in place (index: int64 over dim 0, or a bool
// mask shaped like t's leading dims), outside autograd.
func (t *Tensor) IndexPut(index, values *Tensor) {
	do("index_put_", func() C.dt_err { return C.dtl_index_put_(t.h(), index.h(), values.h()) }, t, index, values)
}

// MaskedFill is t with v wherever the bool mask (broadcast) is true.
func (t *Tensor) MaskedFill(mask *Tensor, v float64) *Tensor {
	return call("masked_fill", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_masked_fill(t.h(), mask.h(), C.double(v), out)
	}, t, mask)
}

// Where picks a where cond is true and b elsewhere.
func Where(cond, a, b *Tensor) *Tensor {
	return call("where", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_where(cond.h(), a.h(), b.h(), out)
	}, cond, a, b)
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
