package serve

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"runtime"
	"strconv"

	"dllm/serve/api"
	"dllm/torch"
)

// handleDebugStats reports the process's resources. With ?gc=1 it runs a
// garbage collection first, so that the heap figures count live memory.
func (s *Server) handleDebugStats(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("gc") == "1" {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := api.DebugStats{
		Goroutines: runtime.NumGoroutine(),
		HeapAlloc:  ms.HeapAlloc, HeapInuse: ms.HeapInuse, HeapObjects: ms.HeapObjects,
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
	st.Running, st.Waiting, _ = s.queue.depth()
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
