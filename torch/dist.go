package torch

/*
#include <stdlib.h>
#include "loader.h"
*/
import "C"

import (
	"fmt"
	"net"
	"runtime"
	"time"
	"unsafe"
)

// Backends of a process group.
const (
	// Gloo reduces CPU tensors over TCP.
	Gloo = "gloo"
	// NCCL reduces CUDA tensors over NVLink, PCIe or the network.
	NCCL = "nccl"
)

// GroupOptions say how a process joins a process group.
type GroupOptions struct {
	// Backend is Gloo (CPU tensors) or NCCL (CUDA tensors).
	Backend string
	// Addr and Port are the rendezvous TCPStore's (torchrun's MASTER_ADDR
	// and MASTER_PORT).
	Addr string
	Port int
	// HostStore makes this process host the store: rank 0, unless a
	// launcher (torchrun's agent) hosts it already.
	HostStore bool
	// Prefix goes before every key of the group in the store ("" none).
	Prefix string
	// Rank is this process's place among World.
	Rank, World int
	// Device is where the group's tensors live: the CPU for Gloo, this
	// rank's GPU for NCCL.
	Device Device
	// Timeout bounds the rendezvous and every collective.
	Timeout time.Duration
}

// Group is a process group: World processes that call the same collectives
// in the same order. A collective that fails or outlasts the timeout panics
// with *Error naming the operation and breaks the group (later calls fail at
// once); Close then releases it without waiting for dead peers, so the
// process should exit.
type Group struct {
	h C.dt_dist
	o GroupOptions
	// BucketBytes is the size of the flat buffers small tensors are packed
	// into, one collective each (0: 25 MB, PyTorch DDP's).
	BucketBytes int64
}

// DistAvailable reports whether the shim can make groups of backend.
func DistAvailable(backend string) bool {
	mustLoad()
	cs := C.CString(backend)
	defer C.free(unsafe.Pointer(cs))
	return C.dtl_dist_available(cs) != 0
}

// NewGroup joins the group o describes; it returns when all World
// processes have joined, or fails after o.Timeout.
func NewGroup(o GroupOptions) (g *Group, err error) {
	defer Recover(&err)
	mustLoad()
	cb, ca, cp := C.CString(o.Backend), C.CString(o.Addr), C.CString(o.Prefix)
	defer C.free(unsafe.Pointer(cb))
	defer C.free(unsafe.Pointer(ca))
	defer C.free(unsafe.Pointer(cp))
	dt, di := o.Device.c()
	var h C.dt_dist
	check("dist", C.dtl_dist_init(cb, ca, C.int(o.Port), cbool(o.HostStore), cp, C.int(o.Rank), C.int(o.World),
		dt, di, C.int64_t(o.Timeout.Milliseconds()), &h))
	return &Group{h: h, o: o}, nil
}

// FreePort is a TCP port free on this machine at the moment of asking: a
// store port for a single-machine group when none is given (another
// process may take it before the store does; the rendezvous then fails
// and says so).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Rank is this process's rank.
func (g *Group) Rank() int { return g.o.Rank }

// World is the number of processes in the group.
func (g *Group) World() int { return g.o.World }

// Device is where the group's tensors live.
func (g *Group) Device() Device { return g.o.Device }

func (g *Group) handle() C.dt_dist {
	if g.h == nil {
		panic(&Error{Op: "dist", Msg: "the group is closed"})
	}
	return g.h
}

// AllReduce replaces each tensor by its sum over all ranks.
func (g *Group) AllReduce(ts ...*Tensor) { g.allReduce(ts, false) }

// AllReduceGrads replaces the gradient of each parameter by its sum over
// all ranks; a parameter without one contributes zeros (and gets the sum).
func (g *Group) AllReduceGrads(params []*Tensor) { g.allReduce(params, true) }

func (g *Group) allReduce(ts []*Tensor, grads bool) {
	mustLoad()
	hs, free := handles(ts)
	defer free()
	e := C.dtl_dist_allreduce(g.handle(), hs, C.int(len(ts)), cbool(grads), C.int64_t(g.BucketBytes))
	runtime.KeepAlive(ts)
	check("dist", e)
}

// Broadcast overwrites the tensors with root's.
func (g *Group) Broadcast(root int, ts ...*Tensor) {
	mustLoad()
	hs, free := handles(ts)
	defer free()
	e := C.dtl_dist_broadcast(g.handle(), hs, C.int(len(ts)), C.int(root), C.int64_t(g.BucketBytes))
	runtime.KeepAlive(ts)
	check("dist", e)
}

// BroadcastBytes returns root's b on every rank (b is ignored elsewhere):
// how one rank's decisions (a checkpoint's state, say) reach the others.
func (g *Group) BroadcastBytes(root int, b []byte) []byte {
	n := Scalar(int64(len(b)))
	defer n.Free()
	nd := n.To(Int64, g.o.Device)
	defer nd.Free()
	g.Broadcast(root, nd)
	size := nd.Int64s()[0]
	if size == 0 {
		return []byte{}
	}
	if g.o.Rank != root {
		b = make([]byte, size)
	}
	t := FromBytes(b, Uint8, []int64{size}, g.o.Device)
	defer t.Free()
	g.Broadcast(root, t)
	return t.Bytes(Uint8)
}

// Barrier returns when every rank has called it.
func (g *Group) Barrier() {
	do("dist", func() C.dt_err { return C.dtl_dist_barrier(g.handle()) })
}

// Close leaves the group. Closing twice is harmless.
func (g *Group) Close() {
	if g == nil || g.h == nil {
		return
	}
	C.dtl_dist_free(g.h)
	g.h = nil
}

func (g *Group) String() string {
	return fmt.Sprintf("%s group, rank %d of %d on %s", g.o.Backend, g.o.Rank, g.o.World, g.o.Device)
}
