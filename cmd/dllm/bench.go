package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"dllm/model"
	"dllm/torch"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure speed",
		Commands: []*cli.Command{{
			Name:  "forward",
			Usage: "latency of one forward pass of N new tokens over a KV cache of C context tokens",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "model", Usage: "model directory with weights"},
				&cli.StringFlag{Name: "config", Usage: "config.json (or its directory) for random weights of that shape"},
				&cli.StringFlag{Name: "device", Value: "auto", Usage: "cpu, cuda, cuda:N or auto"},
				&cli.StringFlag{Name: "dtype", Value: "bf16", Usage: "weight and compute dtype"},
				&cli.StringFlag{Name: "ctx", Value: "4096", Usage: "comma-separated context lengths"},
				&cli.StringFlag{Name: "new", Value: "1,32", Usage: "comma-separated numbers of new tokens per forward"},
				&cli.IntFlag{Name: "iters", Value: 20, Usage: "timed forwards per point"},
				&cli.BoolFlag{Name: "json", Usage: "print one JSON object per point"},
			},
			Action: benchForward,
		}, benchDecodeCommand(), benchLoadCommand()},
	}
}

// benchPoint is one measured (context, new tokens) pair.
type benchPoint struct {
	Device    string  `json:"device"`
	DType     string  `json:"dtype"`
	Context   int     `json:"context"`
	New       int     `json:"new_tokens"`
	MedianMS  float64 `json:"median_ms"`
	P90MS     float64 `json:"p90_ms"`
	TokPerSec float64 `json:"tokens_per_s"`
}

func benchForward(ctx context.Context, c *cli.Command) (err error) {
	ctxs, err := parseInts(c.String("ctx"))
	if err != nil {
		return err
	}
	news, err := parseInts(c.String("new"))
	if err != nil {
		return err
	}
	dev, dt, err := placement(c.String("device"), c.String("dtype"))
	if err != nil {
		return err
	}
	var m *model.Model
	switch {
	case c.String("model") != "":
		m, err = model.Load(c.String("model"), model.LoadOptions{Device: dev, DType: dt})
	case c.String("config") != "":
		var cfg *model.Config
		if cfg, err = model.LoadConfig(c.String("config")); err == nil {
			m, err = model.NewRandom(cfg, model.LoadOptions{Device: dev, DType: dt}, 0, 0.02)
		}
	default:
		return fmt.Errorf("give --model DIR or --config FILE")
	}
	if err != nil {
		return err
	}
	defer m.Free()
	defer torch.Recover(&err)
	sync := func() {
		if dev.CUDA {
			if err := torch.Synchronize(dev.Index); err != nil {
				panic(err)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	randIDs := func(n int) *torch.Tensor {
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = rng.Int64N(int64(m.Config.VocabSize))
		}
		cpu := torch.FromSlice(ids, 1, int64(n))
		defer cpu.Free()
		return cpu.To(torch.Int64, dev)
	}
	w := c.Root().Writer
	if !c.Bool("json") {
		fmt.Fprintf(w, "%-8s %-6s %8s %6s %10s %10s %12s\n", "device", "dtype", "context", "new", "median_ms", "p90_ms", "tokens/s")
	}
	for _, C := range ctxs {
		cache, err := m.NewCache(1, C+slices.Max(news))
		if err != nil {
			return err
		}
		torch.NoGrad(func() {
			// 1. Fill the cache with C context tokens, in chunks to bound memory.
			for done := 0; done < C; {
				n := min(2048, C-done)
				ids := randIDs(n)
				l, err := m.Forward(ids, model.ForwardOpts{Cache: cache, LastN: 1})
				if err != nil {
					panic(err)
				}
				torch.Free(ids, l)
				if err := cache.Commit(int64(n)); err != nil {
					panic(err)
				}
				done += n
			}
			// 2. Time forwards of N new tokens, all attending to the cache and to
			// each other (a diffusion block step; N = 1 is an AR step).
			for _, n := range news {
				ids := randIDs(n)
				lat := make([]float64, 0, c.Int("iters"))
				for i := 0; i < c.Int("iters")+3; i++ {
					sync()
					t0 := time.Now()
					l, err := m.Forward(ids, model.ForwardOpts{Cache: cache, Attention: model.Attention{Kind: model.Bidirectional}})
					if err != nil {
						panic(err)
					}
					sync()
					if i >= 3 { // warm-up
						lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
					}
					l.Free()
				}
				ids.Free()
				slices.Sort(lat)
				p := benchPoint{Device: dev.String(), DType: dt.String(), Context: C, New: n,
					MedianMS: lat[len(lat)/2], P90MS: lat[len(lat)*9/10]}
				p.TokPerSec = float64(n) / (p.MedianMS / 1000)
				if c.Bool("json") {
					json.NewEncoder(w).Encode(p)
				} else {
					fmt.Fprintf(w, "%-8s %-6s %8d %6d %10.2f %10.2f %12.1f\n", p.Device, p.DType, p.Context, p.New, p.MedianMS, p.P90MS, p.TokPerSec)
				}
			}
		})
		cache.Free()
	}
	return nil
}

// parseInts reads "1,32" into positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad number %q in %q", f, s)
		}
		out = append(out, v)
	}
	return out, nil
}
