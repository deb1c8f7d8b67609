package torch

/*
#include <stdlib.h>
#include "loader.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// SetRequiresGrad marks t as a leaf whose gradient autograd accumulates.
func (t *Tensor) SetRequiresGrad(on bool) *Tensor {
	do("set_requires_grad", func() C.dt_err { return C.dtl_set_requires_grad(t.h(), cbool(on)) }, t)
	return t
}

// RequiresGrad reports whether autograd tracks t.
func (t *Tensor) RequiresGrad() bool {
	defer runtime.KeepAlive(t)
	return C.dtl_requires_grad(t.h()) != 0
}

// Backward backpropagates from the scalar t into every leaf that requires
// grad.
func (t *Tensor) Backward() {
	do("backward", func() C.dt_err { return C.dtl_backward(t.h()) }, t)
}

// Grad is t's accumulated gradient, or nil when there is none.
func (t *Tensor) Grad() *Tensor {
	return call("grad", func(out *C.dt_tensor) C.dt_err { return C.dtl_grad(t.h(), out) }, t)
}

// ZeroGrad drops t's accumulated gradient.
func (t *Tensor) ZeroGrad() {
	do("zero_grad", func() C.dt_err { return C.dtl_zero_grad(t.h()) }, t)
}

// NoGrad runs f with autograd recording off. libtorch's grad mode belongs to
// the OS thread, so the goroutine is pinned to its thread while f runs.
func NoGrad(f func()) {
	mustLoad()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := C.dtl_is_grad_enabled()
	C.dtl_set_grad_enabled(0)
	defer C.dtl_set_grad_enabled(prev)
	f()
}

// GradEnabled reports the grad mode of the calling goroutine's current
// thread (meaningful inside NoGrad or with the thread locked).
func GradEnabled() bool {
	mustLoad()
	return C.dtl_is_grad_enabled() != 0
}

// handles copies tensor handles into C memory for calls that take arrays.
func handles(ts []*Tensor) (*C.dt_tensor, func()) {
	p := C.malloc(C.size_t(len(ts)+1) * C.size_t(unsafe.Sizeof(C.dt_tensor(nil))))
	arr := unsafe.Slice((*C.dt_tensor)(p), len(ts))
	for i, t := range ts {
		arr[i] = t.h()
	}
	return (*C.dt_tensor)(p), func() { C.free(p) }
}

// ClipGradNorm scales the gradients of params so that their global L2 norm
// is at most maxNorm, and returns the norm before clipping.
func ClipGradNorm(params []*Tensor, maxNorm float64) float64 {
	mustLoad()
	hs, free := handles(params)
	defer free()
	var norm C.double
	e := C.dtl_clip_grad_norm(hs, C.int(len(params)), C.double(maxNorm), &norm)
	runtime.KeepAlive(params)
	check("clip_grad_norm", e)
	return float64(norm)
}

// AdamWConfig holds AdamW's hyper-parameters.
type AdamWConfig struct {
	LR          float64 // learning rate
	Beta1       float64 // default 0.9
	Beta2       float64 // default 0.999
	Eps         float64 // default 1e-8
	WeightDecay float64 // decoupled decay
}

// AdamW is decoupled-weight-decay Adam over a fixed list of parameters. Its
// moment buffers are float32 tensors on the parameters' devices, held here
// so that checkpoints can save and restore them exactly (State, SetState).
type AdamW struct {
	Config AdamWConfig
	Params []*Tensor
	M, V   []*Tensor // first and second moments, one per parameter
	Steps  int64     // updates applied so far
}

// NewAdamW creates the optimiser with zeroed moments; zero Beta1, Beta2 and
// Eps take the defaults.
func NewAdamW(params []*Tensor, c AdamWConfig) *AdamW {
	mustLoad()
	if c.Beta1 == 0 {
		c.Beta1 = 0.9
	}
	if c.Beta2 == 0 {
		c.Beta2 = 0.999
	}
	if c.Eps == 0 {
		c.Eps = 1e-8
	}
	a := &AdamW{Config: c, Params: params}
	for _, p := range params {
		a.M = append(a.M, Zeros(p.Shape(), Float32, p.Device()))
		a.V = append(a.V, Zeros(p.Shape(), Float32, p.Device()))
	}
	return a
}

// Step applies one update from the accumulated gradients.
func (a *AdamW) Step() {
	a.Steps++
	c := a.Config
	for i, p := range a.Params {
		m, v := a.M[i], a.V[i]
		do("adamw_update", func() C.dt_err {
			return C.dtl_adamw_update(p.h(), m.h(), v.h(), C.int64_t(a.Steps), C.double(c.LR),
				C.double(c.Beta1), C.double(c.Beta2), C.double(c.Eps), C.double(c.WeightDecay))
		}, p, m, v)
	}
}

// ZeroGrad drops the parameters' gradients.
func (a *AdamW) ZeroGrad() {
	for _, p := range a.Params {
		p.ZeroGrad()
	}
}

// SetLR changes the learning rate for the next steps.
func (a *AdamW) SetLR(lr float64) { a.Config.LR = lr }

// Close frees the moment buffers.
func (a *AdamW) Close() {
	Free(a.M...)
	Free(a.V...)
	a.M, a.V = nil, nil
}

// BackwardGrad backpropagates grad (shaped like t) from t.
func (t *Tensor) BackwardGrad(grad *Tensor) {
	do("backward_grad", func() C.dt_err { return C.dtl_backward_grad(t.h(), grad.h()) }, t, grad)
}

// Detach is t cut from the autograd graph (sharing its storage).
func (t *Tensor) Detach() *Tensor {
	return call("detach", func(out *C.dt_tensor) C.dt_err { return C.dtl_detach(t.h(), out) }, t)
}
