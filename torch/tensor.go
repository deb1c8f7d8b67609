package torch

/*
#include "loader.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"unsafe"
)

// DType is a tensor element type, numbered as libtorch's ScalarType.
type DType int

// The element types the shim accepts.
const (
	Uint8    DType = C.DT_U8
	Int8     DType = C.DT_I8
	Int16    DType = C.DT_I16
	Int32    DType = C.DT_I32
	Int64    DType = C.DT_I64
	Float16  DType = C.DT_F16
	Float32  DType = C.DT_F32
	Float64  DType = C.DT_F64
	Bool     DType = C.DT_BOOL
	BFloat16 DType = C.DT_BF16
)

var dtypeNames = map[DType]string{
	Uint8: "u8", Int8: "i8", Int16: "i16", Int32: "i32", Int64: "i64",
	Float16: "f16", Float32: "f32", Float64: "f64", Bool: "bool", BFloat16: "bf16",
}

func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return "dtype(" + strconv.Itoa(int(d)) + ")"
}

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Uint8, Int8, Bool:
		return 1
	case Int16, Float16, BFloat16:
		return 2
	case Int32, Float32:
		return 4
	case Int64, Float64:
		return 8
	}
	return 0
}

// ParseDType accepts the short names (f32, bf16, ...) and the long ones
// (float32, bfloat16, float16, half, ...).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32", "float", "fp32":
		return Float32, nil
	case "bf16", "bfloat16":
		return BFloat16, nil
	case "f16", "float16", "half", "fp16":
		return Float16, nil
	case "f64", "float64", "double":
		return Float64, nil
	case "i64", "int64", "long":
		return Int64, nil
	case "i32", "int32", "int":
		return Int32, nil
	case "bool":
		return Bool, nil
	case "u8", "uint8":
		return Uint8, nil
	}
	return 0, fmt.Errorf("unknown dtype %q (want f32, bf16, f16, f64, i64, i32, bool or u8)", s)
}

// Device is where a tensor lives.
type Device struct {
	CUDA  bool // false: host memory
	Index int  // CUDA ordinal
}

// CPU is host memory.
var CPU = Device{}

// CUDA is the GPU with the given ordinal.
func CUDA(i int) Device { return Device{CUDA: true, Index: i} }

func (d Device) String() string {
	if d.CUDA {
		return "cuda:" + strconv.Itoa(d.Index)
	}
	return "cpu"
}

// ParseDevice accepts "cpu", "cuda" and "cuda:N".
func ParseDevice(s string) (Device, error) {
	switch {
	case s == "cpu":
		return CPU, nil
	case s == "cuda":
		return CUDA(0), nil
	case strings.HasPrefix(s, "cuda:"):
		i, err := strconv.Atoi(s[5:])
		if err == nil && i >= 0 {
			return CUDA(i), nil
		}
	}
	return CPU, fmt.Errorf("unknown device %q (want cpu, cuda or cuda:N)", s)
}

func (d Device) c() (C.int, C.int) {
	if d.CUDA {
		return 1, C.int(d.Index)
	}
	return 0, 0
}

// Tensor is a handle to a libtorch tensor. Free releases it at once; a
// tensor that becomes unreachable unfreed is released by the garbage
// collector, but GPU memory should not wait for that.
type Tensor struct {
	p       C.dt_tensor
	cleanup runtime.Cleanup
}

func wrap(p C.dt_tensor) *Tensor {
	if p == nil {
		return nil
	}
	t := &Tensor{p: p}
	t.cleanup = runtime.AddCleanup(t, func(p C.dt_tensor) { C.dtl_free(p) }, p)
	return t
}

// h is the live handle; using a freed tensor is a bug reported as *Error.
func (t *Tensor) h() C.dt_tensor {
	if t == nil || t.p == nil {
		panic(&Error{Op: "use", Msg: "tensor is nil or freed"})
	}
	return t.p
}

// opt is the handle of an optional argument: nil stays NULL.
func opt(t *Tensor) C.dt_tensor {
	if t == nil {
		return nil
	}
	return t.h()
}

// Free releases the tensor's memory (shared storage lives on while other
// views hold it). Freeing twice is harmless.
func (t *Tensor) Free() {
	if t == nil || t.p == nil {
		return
	}
	t.cleanup.Stop()
	C.dtl_free(t.p)
	t.p = nil
}

// Free releases every tensor given; nils are skipped.
func Free(ts ...*Tensor) {
	for _, t := range ts {
		t.Free()
	}
}

// call runs a shim function that produces one tensor, keeping its inputs
// reachable until it returns (a cleanup must not free an input mid-call).
func call(op string, f func(out *C.dt_tensor) C.dt_err, keep ...*Tensor) *Tensor {
	mustLoad()
	var out C.dt_tensor
	e := f(&out)
	runtime.KeepAlive(keep)
	check(op, e)
	return wrap(out)
}

// do runs a shim function that produces no tensor.
func do(op string, f func() C.dt_err, keep ...*Tensor) {
	mustLoad()
	e := f()
	runtime.KeepAlive(keep)
	check(op, e)
}

func shapeArg(shape []int64) (*C.int64_t, C.int) {
	if len(shape) == 0 {
		return nil, 0
	}
	return (*C.int64_t)(unsafe.Pointer(&shape[0])), C.int(len(shape))
}

// FromBytes copies raw little-endian data laid out as dtype and shape into a
// new tensor on dev. For the GPU the bytes go straight to device memory (no
// host-side copy), so memory-mapped weights load without doubling host RAM.
func FromBytes(data []byte, dtype DType, shape []int64, dev Device) *Tensor {
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	s, n := shapeArg(shape)
	dt, di := dev.c()
	return call("from_data", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_from_data(p, C.size_t(len(data)), C.int(dtype), s, n, dt, di, out)
	})
}

// Element is a Go type with a tensor dtype.
type Element interface {
	~float32 | ~float64 | ~int64 | ~int32 | ~uint8 | ~bool | ~int8 | ~int16
}

func dtypeOf[E Element]() DType {
	var z E
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int64:
		return Int64
	case int32:
		return Int32
	case uint8:
		return Uint8
	case bool:
		return Bool
	case int8:
		return Int8
	case int16:
		return Int16
	}
	panic("unreachable")
}

// FromSlice copies data into a new CPU tensor of the given shape (a 1-d
// tensor when no shape is given).
func FromSlice[E Element](data []E, shape ...int64) *Tensor {
	if shape == nil {
		shape = []int64{int64(len(data))}
	}
	var z E
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), len(data)*int(unsafe.Sizeof(z)))
	return FromBytes(b, dtypeOf[E](), shape, CPU)
}

// Scalar is a 0-d CPU tensor.
func Scalar[E Element](v E) *Tensor { return FromSlice([]E{v}, []int64{}...) }

func newTensor(op string, fill int, value float64, dtype DType, shape []int64, dev Device) *Tensor {
	s, n := shapeArg(shape)
	dt, di := dev.c()
	return call(op, func(out *C.dt_tensor) C.dt_err {
		return C.dtl_new(C.int(fill), C.double(value), C.int(dtype), s, n, dt, di, out)
	})
}

// Empty is an uninitialised tensor.
func Empty(shape []int64, dtype DType, dev Device) *Tensor {
	return newTensor("empty", 0, 0, dtype, shape, dev)
}

// Zeros is a tensor of zeros.
func Zeros(shape []int64, dtype DType, dev Device) *Tensor {
	return newTensor("zeros", 1, 0, dtype, shape, dev)
}

// Ones is a tensor of ones.
func Ones(shape []int64, dtype DType, dev Device) *Tensor {
	return newTensor("ones", 2, 0, dtype, shape, dev)
}

// Full is a tensor filled with v.
func Full(shape []int64, v float64, dtype DType, dev Device) *Tensor {
	return newTensor("full", 3, v, dtype, shape, dev)
}

// Randn draws from the standard normal with libtorch's seeded generator.
func Randn(shape []int64, dtype DType, dev Device) *Tensor {
	return newTensor("randn", 4, 0, dtype, shape, dev)
}

// Rand draws uniformly from [0, 1).
func Rand(shape []int64, dtype DType, dev Device) *Tensor {
	return newTensor("rand", 5, 0, dtype, shape, dev)
}

// Generator is a random generator of its own, seeded, on one device:
// its draws do not depend on anyone else's, so that generations running
// side by side each reproduce their seed. Not safe for concurrent use.
type Generator struct{ p C.dt_generator }

// NewGenerator returns a generator on dev seeded with seed; a CPU one
// draws what the default CPU generator draws after ManualSeed(seed).
func NewGenerator(seed uint64, dev Device) *Generator {
	mustLoad()
	dt, di := dev.c()
	g := &Generator{}
	check("generator_new", C.dtl_generator_new(C.uint64_t(seed), dt, di, &g.p))
	return g
}

// Free releases the generator; nil is fine.
func (g *Generator) Free() {
	if g != nil && g.p != nil {
		C.dtl_generator_free(g.p)
		g.p = nil
	}
}

// Rand draws uniformly from [0, 1) on g's device.
func (g *Generator) Rand(shape []int64, dtype DType) *Tensor {
	s, n := shapeArg(shape)
	return call("rand_from", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_rand_from(g.p, C.int(dtype), s, n, out)
	})
}

// Arange is [start, end) as a 1-d tensor.
func Arange(start, end int64, dtype DType, dev Device) *Tensor {
	dt, di := dev.c()
	return call("arange", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_arange(C.int64_t(start), C.int64_t(end), C.int(dtype), dt, di, out)
	})
}

// Dim is the number of dimensions.
func (t *Tensor) Dim() int {
	defer runtime.KeepAlive(t)
	return int(C.dtl_ndim(t.h()))
}

// Shape is the size of each dimension.
func (t *Tensor) Shape() []int64 {
	defer runtime.KeepAlive(t)
	n := t.Dim()
	s := make([]int64, n)
	if n > 0 {
		C.dtl_shape(t.h(), (*C.int64_t)(unsafe.Pointer(&s[0])), C.int(n))
	}
	return s
}

// Size is the size of dimension d (negative counts from the end).
func (t *Tensor) Size(d int) int64 {
	s := t.Shape()
	if d < 0 {
		d += len(s)
	}
	return s[d]
}

// DType is the element type.
func (t *Tensor) DType() DType {
	defer runtime.KeepAlive(t)
	return DType(C.dtl_dtype(t.h()))
}

// Device is where the tensor lives.
func (t *Tensor) Device() Device {
	defer runtime.KeepAlive(t)
	var typ, idx C.int
	C.dtl_device(t.h(), &typ, &idx)
	return Device{CUDA: typ == 1, Index: int(idx)}
}

// Numel is the number of elements.
func (t *Tensor) Numel() int64 {
	defer runtime.KeepAlive(t)
	return int64(C.dtl_numel(t.h()))
}

// ToSlice copies t to host memory as elements of type E (converting the
// dtype, flattening in row-major order).
func ToSlice[E Element](t *Tensor) []E {
	out := make([]E, t.Numel())
	var z E
	n := len(out) * int(unsafe.Sizeof(z))
	var p unsafe.Pointer
	if n > 0 {
		p = unsafe.Pointer(&out[0])
	}
	do("to_host", func() C.dt_err { return C.dtl_to_host(t.h(), C.int(dtypeOf[E]()), p, C.size_t(n)) }, t)
	return out
}

// HostCopy is a copy of a tensor to host memory still on its way
// (StartToSlice), so that the host can queue more work before it waits.
type HostCopy[E Element] struct {
	p C.dt_host_copy
	n int64
}

// StartToSlice queues ToSlice's copy of t and returns at once: on CUDA the
// copy goes to pinned memory behind the work already queued, and Wait
// waits for it. t may be freed before then.
func StartToSlice[E Element](t *Tensor) *HostCopy[E] {
	c := &HostCopy[E]{n: t.Numel()}
	do("to_host_start", func() C.dt_err { return C.dtl_to_host_start(t.h(), C.int(dtypeOf[E]()), &c.p) }, t)
	return c
}

// Wait returns the copied elements (waiting for them) and frees the copy.
func (c *HostCopy[E]) Wait() []E {
	if c.p == nil {
		panic(&Error{Op: "to_host_wait", Msg: "copy already waited for or freed"})
	}
	out := make([]E, c.n)
	var z E
	n := len(out) * int(unsafe.Sizeof(z))
	var p unsafe.Pointer
	if n > 0 {
		p = unsafe.Pointer(&out[0])
	}
	h := c.p
	c.p = nil
	do("to_host_wait", func() C.dt_err { return C.dtl_to_host_wait(h, p, C.size_t(n)) })
	return out
}

// Free drops a copy that will not be waited for. Freeing twice, or after
// Wait, is harmless.
func (c *HostCopy[E]) Free() {
	if c == nil || c.p == nil {
		return
	}
	C.dtl_host_copy_free(c.p)
	c.p = nil
}

// Float32s copies t to the host as float32.
func (t *Tensor) Float32s() []float32 { return ToSlice[float32](t) }

// Int64s copies t to the host as int64.
func (t *Tensor) Int64s() []int64 { return ToSlice[int64](t) }

// Item is the value of a one-element tensor.
func (t *Tensor) Item() float64 {
	v := ToSlice[float64](t)
	if len(v) != 1 {
		panic(&Error{Op: "item", Msg: fmt.Sprintf("tensor has %d elements, not 1", len(v))})
	}
	return v[0]
}

// Bytes copies t to the host as raw little-endian elements of dtype.
func (t *Tensor) Bytes(dtype DType) []byte {
	out := make([]byte, int(t.Numel())*dtype.Size())
	var p unsafe.Pointer
	if len(out) > 0 {
		p = unsafe.Pointer(&out[0])
	}
	do("to_host", func() C.dt_err { return C.dtl_to_host(t.h(), C.int(dtype), p, C.size_t(len(out))) }, t)
	return out
}

// To converts t to dtype on dev (a new tensor, or t's storage when nothing
// changes).
func (t *Tensor) To(dtype DType, dev Device) *Tensor {
	dt, di := dev.c()
	return call("to", func(out *C.dt_tensor) C.dt_err {
		return C.dtl_to(t.h(), C.int(dtype), dt, di, out)
	}, t)
}

// Clone is a copy with its own storage.
func (t *Tensor) Clone() *Tensor {
	return call("clone", func(out *C.dt_tensor) C.dt_err { return C.dtl_clone(t.h(), out) }, t)
}

// Contiguous is t laid out row-major.
func (t *Tensor) Contiguous() *Tensor {
	return call("contiguous", func(out *C.dt_tensor) C.dt_err { return C.dtl_contiguous(t.h(), out) }, t)
}

// CopyFrom writes src (broadcast, converted) into t in place, outside autograd.
func (t *Tensor) CopyFrom(src *Tensor) {
	do("copy_", func() C.dt_err { return C.dtl_copy_(t.h(), src.h()) }, t, src)
}

// Fill sets every element of t to v in place.
func (t *Tensor) Fill(v float64) {
	do("fill_", func() C.dt_err { return C.dtl_fill_(t.h(), C.double(v)) }, t)
}

func (t *Tensor) String() string {
	if t == nil || t.p == nil {
		return "Tensor(freed)"
	}
	return fmt.Sprintf("Tensor(%v, %v, %v)", t.Shape(), t.DType(), t.Device())
}
