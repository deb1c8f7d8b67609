package torch

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// groups joins world Gloo groups in this process, one goroutine per rank
// (the store and the ranks talk over loopback as separate processes would).
func groups(t *testing.T, world int, timeout time.Duration) []*Group {
	t.Helper()
	if !DistAvailable(Gloo) {
		t.Skip("this shim has no Gloo (apt-get install libgloo-dev, then make shim)")
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	gs := make([]*Group, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[r], errs[r] = NewGroup(GroupOptions{Backend: Gloo, Addr: "127.0.0.1", Port: port, HostStore: r == 0,
				Rank: r, World: world, Device: CPU, Timeout: timeout})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

// onRanks runs f for every rank at once and returns each one's error.
func onRanks(gs []*Group, f func(g *Group)) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = Try(func() { f(g) })
		}()
	}
	wg.Wait()
	return errs
}

// TestDistCollectives: sums, gradient sums and broadcasts over three ranks
// come out exact, with buckets small enough that tensors go both as they
// are and packed (several per buffer, split at a dtype change), and a rank
// without a gradient contributes zeros.
func TestDistCollectives(t *testing.T) {
	gs := groups(t, 3, 20*time.Second)
	for _, g := range gs {
		g.BucketBytes = 64 // 16 float32s
	}
	// rankVals is what rank r holds: n values r*100 + i.
	rankVals := func(r, n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(r*100 + i)
		}
		return v
	}
	sumVals := func(n int) []float64 {
		v := make([]float64, n)
		for r := range gs {
			for i, x := range rankVals(r, n) {
				v[i] += x
			}
		}
		return v
	}
	cases := []struct {
		name  string
		sizes []int
		dtype DType
	}{
		{"one large tensor, as it is", []int{40}, Float32},
		{"small tensors packed", []int{3, 5, 2, 7}, Float32},
		{"mixed sizes", []int{2, 30, 4, 4, 20, 1}, Float32},
		{"float64", []int{9, 1}, Float64},
		{"int64", []int{3}, Int64},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := make([][]*Tensor, len(gs))
			for r := range gs {
				for _, n := range c.sizes {
					ts[r] = append(ts[r], FromSlice(rankVals(r, n)).To(c.dtype, CPU))
				}
			}
			for _, err := range onRanks(gs, func(g *Group) { g.AllReduce(ts[g.Rank()]...) }) {
				if err != nil {
					t.Fatal(err)
				}
			}
			for r := range gs {
				for k, n := range c.sizes {
					closeTo(t, fmt.Sprintf("rank %d tensor %d", r, k), f64(ts[r][k].To(Float64, CPU)), sumVals(n), 0)
				}
				Free(ts[r]...)
			}
		})
	}

	t.Run("gradients", func(t *testing.T) {
		// Parameter 0 has a gradient everywhere, parameter 1 only on rank 0.
		ps := make([][]*Tensor, len(gs))
		for r := range gs {
			for k := range 2 {
				p := Zeros([]int64{4}, Float32, CPU).SetRequiresGrad(true)
				if k == 0 || r == 0 {
					x := FromSlice([]float32{1, 2, 3, 4})
					l := p.Mul(x).MulScalar(float64(r + 1)).SumAll()
					l.Backward()
					Free(x, l)
				}
				ps[r] = append(ps[r], p)
			}
		}
		for _, err := range onRanks(gs, func(g *Group) { g.AllReduceGrads(ps[g.Rank()]) }) {
			if err != nil {
				t.Fatal(err)
			}
		}
		for r := range gs {
			closeTo(t, "grad 0", f64(ps[r][0].Grad().To(Float64, CPU)), []float64{6, 12, 18, 24}, 0) // (1+2+3) x
			closeTo(t, "grad 1", f64(ps[r][1].Grad().To(Float64, CPU)), []float64{1, 2, 3, 4}, 0)    // rank 0's alone
		}
	})

	t.Run("broadcast", func(t *testing.T) {
		// Into leaves that require grad, as parameters at start-up do.
		ts := make([][]*Tensor, len(gs))
		for r := range gs {
			for _, n := range []int{3, 50, 2} {
				ts[r] = append(ts[r], FromSlice(rankVals(r, n)).To(Float32, CPU).SetRequiresGrad(true))
			}
		}
		got := make([][]byte, len(gs))
		for _, err := range onRanks(gs, func(g *Group) {
			g.Broadcast(1, ts[g.Rank()]...)
			got[g.Rank()] = g.BroadcastBytes(1, []byte(fmt.Sprintf("state of rank %d", g.Rank())))
			g.Barrier()
		}) {
			if err != nil {
				t.Fatal(err)
			}
		}
		for r := range gs {
			for k, n := range []int{3, 50, 2} {
				closeTo(t, fmt.Sprintf("rank %d tensor %d", r, k), f64(ts[r][k].To(Float64, CPU)), rankVals(1, n), 0)
			}
			if string(got[r]) != "state of rank 1" {
				t.Errorf("rank %d: broadcast bytes %q", r, got[r])
			}
		}
	})
}

// TestDistFailures: a missing rank, an absent collective partner, a wrong
// device and a backend this shim lacks all end in errors that name the
// operation, within the timeout, and a failed group refuses further work.
func TestDistFailures(t *testing.T) {
	if !DistAvailable(Gloo) {
		t.Skip("this shim has no Gloo (apt-get install libgloo-dev, then make shim)")
	}
	// A second is enough to fail in; a group that must form gets longer (a
	// store client gives up after one failed connection attempt).
	const timeout = time.Second
	t.Run("rendezvous without rank 1", func(t *testing.T) {
		port, _ := FreePort()
		start := time.Now()
		_, err := NewGroup(GroupOptions{Backend: Gloo, Addr: "127.0.0.1", Port: port, HostStore: true, World: 2, Timeout: timeout})
		if err == nil || !strings.Contains(err.Error(), "rendezvous") || !strings.Contains(err.Error(), "rank 0 of 2") {
			t.Fatalf("error %v, want a rendezvous failure naming rank 0 of 2", err)
		}
		t.Log(err)
		if d := time.Since(start); d > 10*timeout {
			t.Fatalf("took %v with a %v timeout", d, timeout)
		}
	})
	t.Run("collective without rank 1", func(t *testing.T) {
		gs := groups(t, 2, 3*timeout)
		x := Ones([]int64{4}, Float32, CPU)
		defer x.Free()
		start := time.Now()
		err := Try(func() { gs[0].AllReduce(x) })
		if err == nil || !strings.Contains(err.Error(), "allreduce") || !strings.Contains(strings.ToLower(err.Error()), "timed out") ||
			!strings.Contains(err.Error(), "rank 0 of 2") {
			t.Fatalf("error %v, want an allreduce timeout naming rank 0 of 2", err)
		}
		t.Log(err)
		if d := time.Since(start); d > 10*timeout {
			t.Fatalf("took %v with a %v timeout", d, 3*timeout)
		}
		if err := Try(func() { gs[0].Barrier() }); err == nil || !strings.Contains(err.Error(), "broken") {
			t.Fatalf("after a timeout: %v, want the group broken", err)
		}
	})
	t.Run("group of one", func(t *testing.T) {
		gs := groups(t, 1, 3*timeout)
		if err := Try(func() { gs[0].AllReduce(Ones([]int64{1}, Float32, CPU)) }); err != nil {
			t.Fatalf("a group of one: %v", err)
		}
	})
	for _, c := range []struct{ backend, want string }{
		{NCCL, "without NCCL"},
		{"mpi", "unknown backend"},
	} {
		t.Run(c.backend, func(t *testing.T) {
			if DistAvailable(c.backend) {
				t.Skipf("this shim has %s", c.backend)
			}
			port, _ := FreePort()
			_, err := NewGroup(GroupOptions{Backend: c.backend, Addr: "127.0.0.1", Port: port, HostStore: true, World: 1,
				Device: CUDA(0), Timeout: timeout})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}
