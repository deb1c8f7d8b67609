package torch

/*
#include "loader.h"
*/
import "C"

// CUDAAvailable reports whether libtorch can use a CUDA GPU (always false for
// a shim built against a CPU libtorch).
func CUDAAvailable() bool {
	mustLoad()
	return C.dtl_cuda_is_available() != 0
}

// CUDADeviceCount is the number of visible GPUs.
func CUDADeviceCount() int {
	mustLoad()
	return int(C.dtl_cuda_device_count())
}

// Synchronize waits for all work queued on GPU dev.
func Synchronize(dev int) error {
	return Try(func() { do("cuda_synchronize", func() C.dt_err { return C.dtl_cuda_synchronize(C.int(dev)) }) })
}

// MemStats are the CUDA caching allocator's byte counts for one GPU.
type MemStats struct {
	Allocated int64 // held by live tensors
	Reserved  int64 // held by the allocator, including its cache
	Peak      int64 // the highest Allocated since start
}

// CUDAMemStats reads the allocator's counters for GPU dev.
func CUDAMemStats(dev int) (MemStats, error) {
	var a, r, p C.int64_t
	err := Try(func() {
		do("cuda_memory_stats", func() C.dt_err { return C.dtl_cuda_memory_stats(C.int(dev), &a, &r, &p) })
	})
	return MemStats{int64(a), int64(r), int64(p)}, err
}

// CUDAMemInfo is GPU dev's free and total memory in bytes (free does not
// count what the caching allocator holds unused: Reserved - Allocated).
func CUDAMemInfo(dev int) (free, total int64, err error) {
	var f, t C.int64_t
	err = Try(func() {
		do("cuda_mem_info", func() C.dt_err { return C.dtl_cuda_mem_info(C.int(dev), &f, &t) })
	})
	return int64(f), int64(t), err
}

// EmptyCache returns the allocator's cached, unused GPU memory to the driver.
func EmptyCache() error {
	return Try(func() { do("cuda_empty_cache", func() C.dt_err { return C.dtl_cuda_empty_cache() }) })
}
