// dist.cpp: data-parallel collectives behind the dt_dist_* functions of
// dllm_torch.h, over libtorch's own c10d: a TCPStore rendezvous, then
// ProcessGroupGloo (CPU tensors) or ProcessGroupNCCL (CUDA tensors).
//
// Conventions are dllm_torch.cpp's: every exported function catches every C++
// exception and returns its message. Two more rules hold here:
//   - no collective waits without bound: each call polls its work against the
//     group's timeout and fails with an error that names the operation, so a
//     dead or missing rank ends the others instead of hanging them;
//   - after a failure the group is broken: later calls fail at once, and
//     dt_dist_free leaks the backend rather than run a destructor that may
//     wait on a dead peer (the process is about to exit anyway).
//
// The c10d API differs between libtorch 1.13 (Debian; ProcessGroup is the
// backend class) and 2.x (the PyTorch wheel; Backend is); the Gloo and NCCL
// headers are guarded by USE_C10D_GLOO / USE_C10D_NCCL, which an external
// build defines itself, and only where the headers they pull in exist (gloo
// from libgloo-dev or the wheel, nccl.h from the wheel's nvidia/nccl).

#include "shim.h"

#include <torch/torch.h>
#include <torch/version.h>

#if __has_include(<gloo/context.h>)
#define USE_C10D_GLOO 1
#define DT_HAVE_GLOO 1
#endif
#if defined(DLLM_CUDA) && __has_include(<nccl.h>)
#define USE_C10D_NCCL 1
#define DT_HAVE_NCCL 1
#endif

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DT_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef DT_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// The default bucket: PyTorch DDP's 25 MB, large enough that a bucket's
// collective runs at link bandwidth, small enough to add little memory.
constexpr int64_t kBucketBytes = 25 << 20;

// NCCL gets more time than our own deadline so that a late collective is
// reported by await (naming the operation), not by NCCL's watchdog, which
// ends the process. Gloo gets the timeout itself: it also bounds Gloo's
// rendezvous, and Gloo's own timeout errors are exceptions await reports.
constexpr Millis kNCCLMargin{60000};

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> pg;
  std::string backend;
  int rank = 0, world = 1;
  at::Device device{at::kCPU};
  Millis timeout{0};
  bool broken = false;

  std::string who() const {
    return "rank " + std::to_string(rank) + " of " + std::to_string(world) + ", " + backend;
  }
};

std::string message(const std::exception &e) {
  if (auto c = dynamic_cast<const c10::Error *>(&e)) return c->what_without_backtrace();
  return e.what();
}

inline Group &G(dt_dist g) { return *static_cast<Group *>(g); }

// await waits for w until deadline, polling: Work::wait has no bound on every
// backend and version (NCCL's only makes the stream wait), so the bound is
// ours. Errors name the operation and the bucket.
void await(Group &g, const c10::intrusive_ptr<c10d::Work> &w, const char *op, size_t k, size_t n,
           Clock::time_point deadline) {
  try {
    while (!w->isCompleted()) {
      if (Clock::now() > deadline) {
        g.broken = true;
        TORCH_CHECK(false, op, ": timed out after ", g.timeout.count() / 1000.0, " s waiting for bucket ", k + 1,
                    " of ", n, " (", g.who(), "): a rank is missing, stuck or dead");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    w->wait(); // rethrows the backend's error; on CUDA orders the current stream after it
  } catch (const std::exception &e) {
    g.broken = true;
    std::string m = message(e);
    if (m.rfind(op, 0) == 0) throw; // ours, already named
    TORCH_CHECK(false, op, " (", g.who(), "): ", m);
  }
}

// A bucket is one collective: a tensor large enough to go as it is, or small
// tensors of one dtype packed into a flat buffer.
struct Bucket {
  std::vector<at::Tensor> parts;
  int64_t bytes = 0;
  at::Tensor flat; // the packed buffer, undefined for a tensor that goes as it is
  c10::intrusive_ptr<c10d::Work> work;
};

std::vector<Bucket> plan(const std::vector<at::Tensor> &ts, int64_t cap) {
  std::vector<Bucket> bs;
  Bucket open;
  auto close = [&] {
    if (!open.parts.empty()) bs.push_back(std::move(open));
    open = Bucket();
  };
  for (const auto &t : ts) {
    int64_t nb = t.numel() * static_cast<int64_t>(t.element_size());
    if (nb >= cap && t.is_contiguous()) {
      Bucket b;
      b.parts.push_back(t);
      b.bytes = nb;
      bs.push_back(std::move(b));
      continue;
    }
    if (!open.parts.empty() && (open.bytes + nb > cap || open.parts[0].scalar_type() != t.scalar_type())) close();
    open.parts.push_back(t);
    open.bytes += nb;
  }
  close();
  return bs;
}

// collective runs issue over ts in buckets, in order, with at most four
// buckets' worth of packed buffers in flight (the packing copies are bounded
// however many small tensors there are), then copies results back unless
// the tensors are the source (broadcast root).
void collective(Group &g, const std::vector<at::Tensor> &ts, int64_t cap, const char *op, bool copy_back,
                const std::function<c10::intrusive_ptr<c10d::Work>(std::vector<at::Tensor> &)> &issue) {
  TORCH_CHECK(!g.broken, op, " (", g.who(), "): the group is broken by an earlier failure");
  at::NoGradGuard ng;
#ifdef DT_HAVE_NCCL
  c10::optional<c10::cuda::CUDAGuard> dg;
  if (g.device.is_cuda()) dg.emplace(g.device);
#endif
  for (const auto &t : ts)
    TORCH_CHECK(t.device() == g.device, op, " (", g.who(), "): a tensor is on ", t.device(), ", the group on ",
                g.device);
  if (cap <= 0) cap = kBucketBytes;
  auto bs = plan(ts, cap);
  auto deadline = Clock::now() + g.timeout;
  std::deque<size_t> inflight;
  int64_t packed = 0;
  auto finish = [&](size_t k) {
    auto &b = bs[k];
    await(g, b.work, op, k, bs.size(), deadline);
    if (b.flat.defined()) {
      if (copy_back) {
        int64_t off = 0;
        for (auto &p : b.parts) {
          p.copy_(b.flat.narrow(0, off, p.numel()).view(p.sizes()));
          off += p.numel();
        }
      }
      packed -= b.bytes;
      b.flat = at::Tensor();
    }
    b.work.reset();
  };
  // 1. Issue bucket after bucket, finishing the oldest while too much is packed.
  for (size_t k = 0; k < bs.size(); k++) {
    auto &b = bs[k];
    std::vector<at::Tensor> arg;
    if (b.parts.size() == 1 && b.parts[0].is_contiguous()) {
      arg.push_back(b.parts[0]);
    } else {
      std::vector<at::Tensor> flat;
      for (auto &p : b.parts) flat.push_back(p.reshape({-1}));
      b.flat = at::cat(flat);
      packed += b.bytes;
      arg.push_back(b.flat);
    }
    try {
      b.work = issue(arg);
    } catch (const std::exception &e) {
      g.broken = true; // earlier buckets may be in flight
      TORCH_CHECK(false, op, " (", g.who(), "): ", message(e));
    }
    inflight.push_back(k);
    while (packed > 4 * cap && inflight.size() > 1) {
      finish(inflight.front());
      inflight.pop_front();
    }
  }
  // 2. Finish the rest in order.
  for (auto k : inflight) finish(k);
}

// tensors turns handles into the tensors a collective works on: detached
// views (the storage is shared, but no autograd check fires on a leaf that
// requires grad), or each one's gradient, created as zeros where there is none
// so that every rank contributes the same list.
std::vector<at::Tensor> tensors(const dt_tensor *ts, int n, bool grads) {
  TORCH_CHECK(n >= 0 && (n == 0 || ts != nullptr), "bad tensor list");
  std::vector<at::Tensor> out;
  for (int i = 0; i < n; i++) {
    auto &t = T(ts[i]);
    if (!grads) {
      out.push_back(t.detach());
      continue;
    }
    auto &gr = t.mutable_grad();
    if (!gr.defined()) gr = at::zeros_like(t);
    out.push_back(gr);
  }
  return out;
}

#ifdef DT_HAVE_GLOO
std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string &addr) {
  // The interface torchrun users name for Gloo, then loopback for a
  // single-machine job (the hostname may resolve to an unreachable address
  // in a container), else the machine's own address.
  if (const char *ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (addr == "localhost" || addr.rfind("127.", 0) == 0)
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

} // namespace

extern "C" {

int dt_dist_available(const char *backend) {
  std::string b = backend ? backend : "";
#ifdef DT_HAVE_GLOO
  if (b == "gloo") return 1;
#endif
#ifdef DT_HAVE_NCCL
  if (b == "nccl") return 1;
#endif
  return 0;
}

dt_err dt_dist_init(const char *backend, const char *addr, int port, int host_store, const char *prefix, int rank,
                    int world, int device_type, int device_index, int64_t timeout_ms, dt_dist *out) {
  std::unique_ptr<Group> g(new Group);
  return guard([&] {
    TORCH_CHECK(backend && addr && prefix, "init: null argument");
    TORCH_CHECK(world >= 1 && rank >= 0 && rank < world, "init: rank ", rank, " of ", world);
    TORCH_CHECK(port > 0 && port < 65536, "init: port ", port);
    TORCH_CHECK(timeout_ms > 0, "init: timeout ", timeout_ms, " ms");
    g->backend = backend;
    g->rank = rank;
    g->world = world;
    g->timeout = Millis(timeout_ms);
    g->device = device_type == 1 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index))
                                 : at::Device(at::kCPU);
    // 1. Rendezvous: every rank connects to the store at addr:port and counts
    // itself in; TCPStore's own wait for workers gives up silently, so the
    // count is waited for here.
    try {
      c10d::TCPStoreOptions so;
      so.port = static_cast<uint16_t>(port);
      so.isServer = host_store != 0;
      so.numWorkers = static_cast<size_t>(world);
      so.waitWorkers = false;
      so.timeout = g->timeout;
      g->store = c10::make_intrusive<c10d::TCPStore>(std::string(addr), so);
      if (*prefix) g->store = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), g->store);
      const std::string key = "dllm/joined";
      g->store->add(key, 1);
      auto deadline = Clock::now() + g->timeout;
      for (int64_t n; (n = g->store->add(key, 0)) < world;) {
        TORCH_CHECK(Clock::now() < deadline, n, " of ", world, " ranks arrived");
        std::this_thread::sleep_for(Millis(10));
      }
    } catch (const std::exception &e) {
      TORCH_CHECK(false, "rendezvous at ", addr, ":", port, " (", g->who(), ") failed within ",
                  timeout_ms / 1000.0, " s: ", message(e));
    }
    // 2. The backend, which exchanges its own addresses through the store.
    try {
      if (g->backend == "gloo") {
#ifdef DT_HAVE_GLOO
        TORCH_CHECK(device_type == 0, "gloo works on CPU tensors; use nccl for CUDA");
        auto o = c10d::ProcessGroupGloo::Options::create(g->timeout);
        o->devices.push_back(gloo_device(addr));
        g->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(g->store, rank, world, o);
#else
        TORCH_CHECK(false, "this libdllmtorch was built without Gloo's headers (apt-get install libgloo-dev, then make shim)");
#endif
      } else if (g->backend == "nccl") {
#ifdef DT_HAVE_NCCL
        TORCH_CHECK(device_type == 1, "nccl works on CUDA tensors; use gloo on the CPU");
        c10::cuda::set_device(g->device.index());
        auto o = c10d::ProcessGroupNCCL::Options::create();
        o->timeout = g->timeout + kNCCLMargin;
        g->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(g->store, rank, world, o);
#else
        TORCH_CHECK(false, "this libdllmtorch was built without NCCL (build it with make shim TORCH=... against a CUDA wheel)");
#endif
      } else {
        TORCH_CHECK(false, "unknown backend \"", g->backend, "\" (want gloo or nccl)");
      }
    } catch (const std::exception &e) {
      TORCH_CHECK(false, "making the ", g->backend, " group (", g->who(), "): ", message(e));
    }
    *out = g.release();
  });
}

dt_err dt_dist_allreduce(dt_dist g, const dt_tensor *ts, int n, int grads, int64_t bucket_bytes) {
  return guard([&] {
    auto &gr = G(g);
    collective(gr, tensors(ts, n, grads != 0), bucket_bytes, "allreduce", true, [&](std::vector<at::Tensor> &a) {
      c10d::AllreduceOptions o;
      o.reduceOp = c10d::ReduceOp::SUM;
      return gr.pg->allreduce(a, o);
    });
  });
}

dt_err dt_dist_broadcast(dt_dist g, const dt_tensor *ts, int n, int root, int64_t bucket_bytes) {
  return guard([&] {
    auto &gr = G(g);
    TORCH_CHECK(root >= 0 && root < gr.world, "broadcast: root ", root, " of ", gr.world);
    collective(gr, tensors(ts, n, false), bucket_bytes, "broadcast", gr.rank != root,
               [&](std::vector<at::Tensor> &a) {
                 c10d::BroadcastOptions o;
                 o.rootRank = root;
                 return gr.pg->broadcast(a, o);
               });
  });
}

dt_err dt_dist_barrier(dt_dist g) {
  return guard([&] {
    auto &gr = G(g);
    // An all-reduce of one element on the group's own device: the backends'
    // barriers guess the GPU from the rank, which is wrong across nodes.
    std::vector<at::Tensor> one{at::zeros({1}, at::TensorOptions().device(gr.device))};
    collective(gr, one, 0, "barrier", false, [&](std::vector<at::Tensor> &a) { return gr.pg->allreduce(a); });
  });
}

void dt_dist_free(dt_dist g) {
  if (!g) return;
  auto *gr = static_cast<Group *>(g);
  if (gr->broken) {
    gr->pg.release();
    gr->store.release();
  }
  delete gr;
}

} // extern "C"
