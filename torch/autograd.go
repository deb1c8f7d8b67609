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
	WeightDecay float64 // decoupled decay, default 0.01
}

// AdamW is libtorch's AdamW optimiser over a fixed list of parameters; its
// moment buffers live on the parameters' device.
type AdamW struct {
	p      C.dt_optim
	params []*Tensor
}

// NewAdamW creates the optimiser; zero Beta1/Beta2/Eps take the defaults.
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
	hs, free := handles(params)
	defer free()
	var o C.dt_optim
	e := C.dtl_adamw_new(hs, C.int(len(params)), C.double(c.LR), C.double(c.Beta1), C.double(c.Beta2),
		C.double(c.Eps), C.double(c.WeightDecay), &o)
	runtime.KeepAlive(params)
	check("adamw_new", e)
	return &AdamW{p: o, params: params}
}

// Step applies one update from the accumulated gradients.
func (a *AdamW) Step() {
	mustLoad()
	e := C.dtl_adamw_step(a.p)
	runtime.KeepAlive(a.params)
	check("adamw_step", e)
}

// ZeroGrad clears the parameters' gradients.
func (a *AdamW) ZeroGrad() {
	mustLoad()
	check("adamw_zero_grad", C.dtl_adamw_zero_grad(a.p))
}

// SetLR changes the learning rate for the next steps.
func (a *AdamW) SetLR(lr float64) { C.dtl_adamw_set_lr(a.p, C.double(lr)) }

// Close frees the optimiser state.
func (a *AdamW) Close() {
	if a.p != nil {
		C.dtl_adamw_free(a.p)
		a.p = nil
	}
}
