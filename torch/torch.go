// Package torch is dllm's only cgo package: tensors and operations backed by
// libtorch through libdllmtorch.so, a thin C shim (csrc/) built against
// whichever libtorch the machine has: Debian's CPU libtorch-dev, or a PyTorch
// wheel's CUDA build.
//
// The shim is opened with dlopen on first use rather than linked, so commands
// that need no tensors (tokenize, data, eval) start without libtorch's 0.4 s
// and 160 MB, and a missing or mismatched shim is a readable error instead of
// a loader failure before main.
//
// Operations panic with *Error when libtorch reports a failure; entry points of
// the packages above this one (model, diffusion, train) turn such panics into
// ordinary errors with Recover, so model code reads like the maths while every
// C++ exception still reaches the caller as a Go error.
package torch

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "loader.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"
)

// ShimName is the file name of the shim library.
const ShimName = "libdllmtorch.so"

var (
	loadOnce sync.Once
	loadErr  error
	shimPath string
)

// Load opens the shim and checks its ABI version. It is called implicitly by
// the first operation; commands call it early to report a missing shim before
// doing any work. The search order is $DLLM_TORCH_LIB, the executable's
// directory, then bin/ in the working directory or any parent (so `go test`
// finds the shim that `make shim` built).
func Load() error {
	loadOnce.Do(func() {
		var tried []string
		for _, p := range candidates() {
			if _, err := os.Stat(p); err != nil {
				tried = append(tried, p)
				continue
			}
			cp := C.CString(p)
			msg := C.dtl_open(cp)
			C.free(unsafe.Pointer(cp))
			if msg != nil {
				loadErr = fmt.Errorf("torch: cannot use %s: %s\n%s", p, C.GoString(msg), buildHint)
				return
			}
			shimPath = p
			// libtorch 1.13 reports one thread although OpenMP sees all cores.
			C.dtl_set_num_threads(C.int(runtime.NumCPU()))
			return
		}
		loadErr = fmt.Errorf("torch: %s not found (looked at %v)\n%s", ShimName, tried, buildHint)
	})
	return loadErr
}

const buildHint = `Build it with 'make shim' (CPU, needs Debian's libtorch-dev: 'make deps'),
or 'make shim TORCH=$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))")'
against a PyTorch wheel with CUDA; or point DLLM_TORCH_LIB at a built ` + ShimName + `.`

func candidates() []string {
	var c []string
	if p := os.Getenv("DLLM_TORCH_LIB"); p != "" {
		return []string{p}
	}
	if exe, err := os.Executable(); err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		c = append(c, filepath.Join(filepath.Dir(exe), ShimName))
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			c = append(c, filepath.Join(d, "bin", ShimName))
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return c
}

func mustLoad() {
	if err := Load(); err != nil {
		panic(&Error{Op: "load", Msg: err.Error()})
	}
}

// ShimPath is the shim that Load opened ("" before).
func ShimPath() string { return shimPath }

// Version is the libtorch version the shim was built against.
func Version() string {
	mustLoad()
	return C.GoString(C.dtl_torch_version())
}

// ABIVersion is the shim interface version this package was built for.
const ABIVersion = int(C.DT_ABI_VERSION)

// Error is a failure reported by libtorch, with its message minus the C++
// backtrace.
type Error struct {
	Op  string // the shim function that failed
	Msg string
}

func (e *Error) Error() string { return "torch: " + e.Op + ": " + e.Msg }

// check panics with *Error when a shim call returned an error message.
func check(op string, e C.dt_err) {
	if e == nil {
		return
	}
	msg := C.GoString(e)
	C.dtl_free_error(e)
	panic(&Error{Op: op, Msg: msg})
}

// Recover turns a panic carrying *Error into *errp; other panics go on. Use
// it as `defer torch.Recover(&err)` at the top of a function that calls ops.
func Recover(errp *error) {
	r := recover()
	if r == nil {
		return
	}
	if e, ok := r.(*Error); ok {
		*errp = e
		return
	}
	panic(r)
}

// Try runs f and returns the first libtorch failure inside it as an error.
func Try(f func()) (err error) {
	defer Recover(&err)
	f()
	return nil
}

// IsError reports whether err is a libtorch failure.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// SetNumThreads sets libtorch's intra-op thread count.
func SetNumThreads(n int) {
	mustLoad()
	C.dtl_set_num_threads(C.int(n))
}

// NumThreads is libtorch's intra-op thread count.
func NumThreads() int {
	mustLoad()
	return int(C.dtl_get_num_threads())
}

// ManualSeed seeds libtorch's default generators (CPU and CUDA).
func ManualSeed(seed uint64) {
	mustLoad()
	C.dtl_manual_seed(C.uint64_t(seed))
}

// SetAllowTF32 lets float32 matmuls on the GPU use TF32 (faster, ~1e-3
// relative error per product); libtorch's default is off.
func SetAllowTF32(on bool) {
	mustLoad()
	C.dtl_set_allow_tf32(cbool(on))
}

// AllowTF32 reports whether float32 GPU matmuls may use TF32.
func AllowTF32() bool {
	mustLoad()
	return C.dtl_get_allow_tf32() != 0
}

// LiveTensors counts tensors created and not yet freed, for leak checks.
func LiveTensors() int64 {
	mustLoad()
	return int64(C.dtl_live_tensors())
}
