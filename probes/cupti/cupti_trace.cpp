// cupti_trace.cpp: a CUDA injection library (CUDA_INJECTION64_PATH) that
// records every kernel's start and end on the GPU as it really ran
// (CUPTI's concurrent-kernel activity: graph nodes one by one, overlap kept),
// and every memset and memcpy (named "memset" and "memcpy": graph nodes
// that are not kernels, which would otherwise show as idle time), and
// appends "start end name" lines to $DLLM_TRACE_OUT. Buffers are small
// and flushed every 100 ms, as a Go program exits without running C's
// atexit handlers (the last fraction of a second is lost). Built and used
// by probes/gpu-timeline.sh; KREC, SREC and CREC are the newest kernel,
// memset and memcpy record types of the CUPTI headers at hand.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

FILE *out;
std::mutex mu;

void CUPTIAPI requested(uint8_t **buf, size_t *size, size_t *max) {
  *size = 1 << 20;
  *buf = static_cast<uint8_t *>(aligned_alloc(8, *size));
  *max = 0;
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t *buf, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(mu);
  CUpti_Activity *rec = nullptr;
  while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET || rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      bool set = rec->kind == CUPTI_ACTIVITY_KIND_MEMSET;
      auto start = set ? reinterpret_cast<SREC *>(rec)->start : reinterpret_cast<CREC *>(rec)->start;
      auto end = set ? reinterpret_cast<SREC *>(rec)->end : reinterpret_cast<CREC *>(rec)->end;
      std::fprintf(out, "%llu %llu %s\n", static_cast<unsigned long long>(start),
                   static_cast<unsigned long long>(end), set ? "memset" : "memcpy");
      continue;
    }
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    auto *k = reinterpret_cast<KREC *>(rec);
    int st = 0;
    char *d = abi::__cxa_demangle(k->name, nullptr, nullptr, &st);
    std::fprintf(out, "%llu %llu %s\n", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), st == 0 && d ? d : k->name);
    std::free(d);
  }
  std::fflush(out);
  std::free(buf);
}

} // namespace

extern "C" int InitializeInjection(void) {
  const char *path = std::getenv("DLLM_TRACE_OUT");
  out = std::fopen(path ? path : "/tmp/trace.txt", "w");
  if (!out) return 0;
  if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS)
    return 0;
  cuptiActivityFlushPeriod(100);
  return 1;
}
