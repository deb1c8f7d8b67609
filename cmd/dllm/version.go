package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/urfave/cli/v3"

	"dllm/torch"
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print versions of dllm, the libtorch shim and the GPU; --smoke also runs a tensor check",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "smoke", Usage: "run a tensor smoke check (matmul, attention, memory stats)"},
			&cli.StringFlag{Name: "device", Value: "auto", Usage: "device for --smoke: auto, cpu, cuda or cuda:N"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			w := c.Root().Writer
			fmt.Fprintf(w, "dllm %s\n", version)
			if err := torch.Load(); err != nil {
				fmt.Fprintf(w, "libtorch: not available\n")
				if c.Bool("smoke") {
					return err
				}
				return nil
			}
			fmt.Fprintf(w, "libtorch %s (shim %s, ABI %d, %d threads)\n", torch.Version(), torch.ShimPath(), torch.ABIVersion, torch.NumThreads())
			if torch.CUDAAvailable() {
				fmt.Fprintf(w, "cuda: %d device(s), tf32 matmul %v\n", torch.CUDADeviceCount(), torch.AllowTF32())
			} else {
				fmt.Fprintf(w, "cuda: not available\n")
			}
			yes := map[bool]string{true: "yes", false: "no"}
			fmt.Fprintf(w, "data parallel (train --nproc): gloo %s, nccl %s\n", yes[torch.DistAvailable(torch.Gloo)], yes[torch.DistAvailable(torch.NCCL)])
			if !c.Bool("smoke") {
				return nil
			}
			dev, err := pickDevice(c.String("device"))
			if err != nil {
				return err
			}
			return smoke(w, dev)
		},
	}
}

// placement reads the --device and --dtype flags, loading the shim first
// (the device check needs it).
func placement(device, dtype string) (torch.Device, torch.DType, error) {
	dt, err := computeDType(dtype)
	if err != nil {
		return torch.CPU, 0, err
	}
	if err := torch.Load(); err != nil {
		return torch.CPU, 0, err
	}
	dev, err := pickDevice(device)
	return dev, dt, err
}

// decoderFlags are the fast decoder's choices a user may need on a GPU:
// memory, and GPUs shared through MPS (model.LoadOptions).
func decoderFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "no-norm-fold", Usage: "save the decoder's copies of the QKV and gate-up weights with the RMSNorm folded in (2.4 GB for MiniCPM5-2B) for 3-4% slower block steps"},
		&cli.BoolFlag{Name: "no-persistent-kernel", Usage: "keep block steps off the persistent kernel, which needs an SM for each of its CTAs at once: for a GPU shared through MPS"},
	}
}

// computeDType reads a --dtype flag's value: a model's weights and
// compute are bf16, f16 or f32.
func computeDType(s string) (torch.DType, error) {
	d, err := torch.ParseDType(s)
	if err != nil || d != torch.BFloat16 && d != torch.Float16 && d != torch.Float32 {
		return 0, fmt.Errorf("--dtype %s: want bf16, f16 or f32", s)
	}
	return d, nil
}

// pickDevice resolves "auto" to the first GPU when there is one, and checks
// that a named GPU exists.
func pickDevice(s string) (torch.Device, error) {
	if s == "auto" {
		if torch.CUDAAvailable() {
			return torch.CUDA(0), nil
		}
		return torch.CPU, nil
	}
	d, err := torch.ParseDevice(s)
	if err != nil {
		return d, err
	}
	if d.CUDA && (!torch.CUDAAvailable() || d.Index >= torch.CUDADeviceCount()) {
		return d, fmt.Errorf("device %s requested but libtorch sees %d GPU(s) (shim %s)", d, torch.CUDADeviceCount(), torch.ShimPath())
	}
	return d, nil
}

// smoke checks a bf16 matmul and an attention call on dev against float64
// results computed on the CPU, and prints timings and memory figures.
func smoke(w interface{ Write([]byte) (int, error) }, dev torch.Device) (err error) {
	defer torch.Recover(&err)
	torch.ManualSeed(0)
	const n = 1024 // big enough to time, small enough for a CPU
	a := torch.Randn([]int64{n, n}, torch.Float64, torch.CPU)
	b := torch.Randn([]int64{n, n}, torch.Float64, torch.CPU)
	ab, bb := a.To(torch.BFloat16, dev), b.To(torch.BFloat16, dev)
	// The reference multiplies the same bf16-rounded inputs in float64, so the
	// error measured is the kernel's accumulation and output rounding.
	want := ab.To(torch.Float64, torch.CPU).Matmul(bb.To(torch.Float64, torch.CPU))
	ab.Matmul(bb).Free() // warm-up
	sync := func() {
		if dev.CUDA {
			if err := torch.Synchronize(dev.Index); err != nil {
				panic(err)
			}
		}
	}
	sync()
	start := time.Now()
	const reps = 10
	var got *torch.Tensor
	for i := 0; i < reps; i++ {
		got.Free()
		got = ab.Matmul(bb)
	}
	sync()
	el := time.Since(start)
	rel := relErr(got.To(torch.Float64, torch.CPU), want)
	fmt.Fprintf(w, "bf16 matmul %dx%d on %s: %.1f GFLOP/s, relative error %.2e\n", n, n, dev,
		2*n*n*n*reps/el.Seconds()/1e9, rel)
	// libtorch 1.13's CPU bf16 matmul accumulates in bf16 (~4e-2 at K=1024);
	// CUDA accumulates in float32 (~1e-3).
	tol := 1e-1
	if dev.CUDA {
		tol = 1e-2
	}
	if rel > tol {
		return fmt.Errorf("bf16 matmul relative error %.2e is above %.0e", rel, tol)
	}

	q := torch.Randn([]int64{1, 16, 32, 128}, torch.Float64, torch.CPU)
	k := torch.Randn([]int64{1, 2, 512, 128}, torch.Float64, torch.CPU)
	v := torch.Randn([]int64{1, 2, 512, 128}, torch.Float64, torch.CPU)
	ref := torch.SDPA(q, k, v, torch.AttnOpts{Causal: true, Impl: torch.AttnMath})
	out := torch.SDPA(q.To(torch.BFloat16, dev), k.To(torch.BFloat16, dev), v.To(torch.BFloat16, dev), torch.AttnOpts{Causal: true})
	rel = relErr(out.To(torch.Float64, torch.CPU), ref)
	fmt.Fprintf(w, "bf16 attention (16 q heads, 2 kv heads, 32 x 512) on %s: relative error %.2e\n", dev, rel)
	if rel > tol {
		return fmt.Errorf("bf16 attention relative error %.2e is too large", rel)
	}
	if dev.CUDA {
		ms, err := torch.CUDAMemStats(dev.Index)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "cuda memory: allocated %d B, reserved %d B, peak %d B\n", ms.Allocated, ms.Reserved, ms.Peak)
	}
	fmt.Fprintln(w, "smoke: ok")
	return nil
}

// relErr is ||got - want|| / ||want||.
func relErr(got, want *torch.Tensor) float64 {
	d := got.Sub(want)
	num := d.Mul(d).SumAll().Item()
	den := want.Mul(want).SumAll().Item()
	return math.Sqrt(num / den)
}
