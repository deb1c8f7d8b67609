// Package api holds the wire types of dllm serve's HTTP API that its
// clients share: the server writes them, serve/loadgen and dllm bench load
// read them.
package api

// DebugStats is the body of dllm serve's GET /debug/stats (--debug-stats):
// what a load test samples to tell a leak from a warm-up. Memory figures are
// bytes.
type DebugStats struct {
	Goroutines  int    `json:"goroutines"`
	HeapAlloc   uint64 `json:"heap_alloc_bytes"`
	HeapInuse   uint64 `json:"heap_inuse_bytes"`
	HeapObjects uint64 `json:"heap_objects"`
	GoSys       uint64 `json:"go_sys_bytes"`
	NumGC       uint32 `json:"num_gc"`
	// RSS and RSSPeak are the process's resident memory (VmRSS, VmHWM from
	// /proc/self/status), libtorch's included; 0 where there is no /proc.
	RSS     int64 `json:"rss_bytes"`
	RSSPeak int64 `json:"rss_peak_bytes"`
	// OpenFDs counts /proc/self/fd entries (-1 where there is no /proc):
	// connections and files.
	OpenFDs int `json:"open_fds"`
	// LiveTensors counts libtorch tensors not yet freed (-1 without libtorch).
	LiveTensors int64  `json:"live_tensors"`
	Running     int    `json:"running"`
	Waiting     int    `json:"waiting"`
	Requests    uint64 `json:"requests"`
}
