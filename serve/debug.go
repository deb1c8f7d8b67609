package serve

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"runtime"
	"strconv"

	"dllm/torch"
)

// debugStats is the body of GET /debug/stats (Config.DebugStats): what a
// load test samples to tell a leak from a warm-up. Memory figures are
// bytes.
type debugStats struct {
	Goroutines int    `json:"goroutines"`
	HeapAlloc  uint64 `json:"heap_alloc_bytes"`
	HeapInuse  uint64 `json:"heap_inuse_bytes"`
	HeapObjs   uint64 `json:"heap_objects"`
	GoSys      uint64 `json:"go_sys_bytes"`
	NumGC      uint32 `json:"num_gc"`
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

// handleDebugStats reports the process's resources. With ?gc=1 it runs a
// garbage collection first, so that the heap figures count live memory.
func (s *Server) handleDebugStats(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("gc") == "1" {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := debugStats{
		Goroutines: runtime.NumGoroutine(),
		HeapAlloc:  ms.HeapAlloc, HeapInuse: ms.HeapInuse, HeapObjs: ms.HeapObjects,
		GoSys: ms.Sys, NumGC: ms.NumGC,
		OpenFDs: -1, LiveTensors: -1,
		Requests: s.requests.Load(),
	}
	st.RSS, st.RSSPeak = procMemory()
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		st.OpenFDs = len(fds)
	}
	if torch.ShimPath() != "" { // loaded; never load it just for this
		st.LiveTensors = torch.LiveTensors()
	}
	st.Running, st.Waiting = s.queue.depth()
	writeJSON(w, http.StatusOK, st)
}

// procMemory reads VmRSS and VmHWM from /proc/self/status, in bytes.
func procMemory() (rss, peak int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			continue
		}
		switch string(f[0]) {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}
