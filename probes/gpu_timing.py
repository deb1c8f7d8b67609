"""GPU timing helpers shared by the probe scripts (probes/gpu_probe.py,
probes/gpu_gemm_probe.py): a CUDA graph replayed many times, so that
launch overhead does not count, and the device's copy bandwidth as the
floor that memory-bound pieces are compared with."""
import torch


def timed(fns, n=240):
    """Microseconds per call of the functions fns, run in turn inside one
    CUDA graph replayed until about n calls were timed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = max(1, n // len(fns))
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / (reps * len(fns)) * 1000


def copy_bandwidth(dev="cuda"):
    """GB/s of a 1 GiB device-to-device copy (read plus write)."""
    x = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    return 2 * x.numel() / (timed([lambda: y.copy_(x)] * 10, 20) * 1e-6) / 1e9
