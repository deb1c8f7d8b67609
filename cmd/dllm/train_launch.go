package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/urfave/cli/v3"

	"dllm/torch"
)

// launchFlags are `dllm train`'s flags that start ranks rather than train:
// the ranks get every other flag as given.
var launchFlags = []string{"nproc", "nnodes", "node-rank", "master-addr", "master-port"}

// launch is `dllm train --nproc N`: this machine's N ranks of a
// data-parallel job, each a `dllm train` process of its own with torchrun's
// variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT). Rank 0's output passes through; the other ranks' lines are
// prefixed with "[rank K] " (they print only warnings and errors). When a
// rank fails, the others are killed and the launch fails naming it.
type launch struct {
	nproc, nnodes, nodeRank int
	addr                    string
	port                    int
	exe                     string   // the dllm binary
	args                    []string // every rank's arguments
	stdout, stderr          io.Writer
}

// newLaunch is the launch c asks for, or nil when this process is to train
// itself: alone, or as a rank that torchrun or a launch started.
func newLaunch(c *cli.Command) (*launch, error) {
	l := &launch{nproc: c.Int("nproc"), nnodes: c.Int("nnodes"), nodeRank: c.Int("node-rank"),
		addr: c.String("master-addr"), port: c.Int("master-port"), stdout: c.Root().Writer, stderr: c.Root().ErrWriter}
	if l.nproc == 1 && l.nnodes == 1 {
		return nil, nil
	}
	switch {
	case os.Getenv("WORLD_SIZE") != "":
		return nil, errors.New("train: --nproc/--nnodes in a process that WORLD_SIZE already places in a job (torchrun starts the ranks itself: leave them out)")
	case l.nproc < 1 || l.nnodes < 1 || l.nodeRank < 0 || l.nodeRank >= l.nnodes:
		return nil, fmt.Errorf("train: --nproc %d --nnodes %d --node-rank %d: want at least one of each and 0 <= node-rank < nnodes", l.nproc, l.nnodes, l.nodeRank)
	case l.nnodes > 1 && !c.IsSet("master-addr"):
		return nil, errors.New("train: --nnodes > 1 needs --master-addr: the address of node 0, where rank 0 hosts the rendezvous store")
	}
	if l.port == 0 && l.nnodes > 1 {
		l.port = 29500 // torchrun's
	}
	if l.port == 0 {
		var err error
		if l.port, err = torch.FreePort(); err != nil {
			return nil, fmt.Errorf("train: a port for the rendezvous store: %w", err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("train: the dllm binary to start ranks with: %w", err)
	}
	l.exe = exe
	l.args = []string{"train"}
	for _, f := range c.Flags {
		name := f.Names()[0]
		if !c.IsSet(name) || slices.Contains(launchFlags, name) {
			continue
		}
		switch v := c.Value(name).(type) {
		case []string:
			for _, s := range v {
				l.args = append(l.args, "--"+name+"="+s)
			}
		default:
			l.args = append(l.args, fmt.Sprintf("--%s=%v", name, v))
		}
	}
	return l, nil
}

// rankExit is how one rank's process ended.
type rankExit struct {
	rank int
	err  error
	last string // its last line of stderr
}

// run starts the ranks and waits for them. A failed rank ends the others
// (SIGKILL: they would only wait for it in their next collective) unless
// the launch was interrupted, when every rank is stopping on its own after
// the same step (rank 0 checkpoints and says so).
func (l *launch) run(ctx context.Context) error {
	world := l.nproc * l.nnodes
	fmt.Fprintf(l.stderr, "train: starting ranks %d-%d of %d (store %s:%d)\n", l.nodeRank*l.nproc, (l.nodeRank+1)*l.nproc-1, world, l.addr, l.port)
	// Pdeathsig is delivered when the thread that started a child exits:
	// keep this goroutine on its thread until every rank has ended.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// 1. Start every local rank.
	var mu sync.Mutex // one line at a time from all ranks
	cmds := make([]*exec.Cmd, l.nproc)
	exits := make(chan rankExit, l.nproc)
	for i := range l.nproc {
		rank := l.nodeRank*l.nproc + i
		prefix := ""
		if rank != 0 {
			prefix = fmt.Sprintf("[rank %d] ", rank)
		}
		cmd := exec.Command(l.exe, l.args...)
		cmd.Env = append(withoutDistEnv(os.Environ()), "RANK="+strconv.Itoa(rank), "LOCAL_RANK="+strconv.Itoa(i),
			"WORLD_SIZE="+strconv.Itoa(world), "LOCAL_WORLD_SIZE="+strconv.Itoa(l.nproc),
			"MASTER_ADDR="+l.addr, "MASTER_PORT="+strconv.Itoa(l.port))
		out := &lineWriter{w: l.stdout, prefix: prefix, mu: &mu}
		errOut := &lineWriter{w: l.stderr, prefix: prefix, mu: &mu}
		cmd.Stdout, cmd.Stderr = out, errOut
		cmd.SysProcAttr = rankProcAttr()
		if err := cmd.Start(); err != nil {
			for _, c := range cmds[:i] {
				c.Process.Kill()
				c.Wait()
			}
			return fmt.Errorf("train: starting rank %d: %w", rank, err)
		}
		cmds[i] = cmd
		go func() {
			err := cmd.Wait() // and for the copying of its output
			out.flush()
			errOut.flush()
			exits <- rankExit{rank: rank, err: err, last: errOut.last}
		}()
	}
	// 2. Wait for them all: kill the rest at the first failure, forward an
	// interruption to ranks that the terminal's Ctrl-C did not reach (a
	// SIGTERM to this process alone).
	var failed []rankExit // in the order they ended
	interrupted, killed := false, false
	done := ctx.Done()
	for left := l.nproc; left > 0; {
		select {
		case <-done:
			interrupted, done = true, nil
			for _, c := range cmds {
				c.Process.Signal(syscall.SIGTERM)
			}
		case e := <-exits:
			left--
			if e.err == nil {
				continue
			}
			failed = append(failed, e)
			if !interrupted && !killed {
				killed = true
				for _, c := range cmds {
					c.Process.Kill() // an ended process ignores it
				}
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	if interrupted {
		return errors.New("train: interrupted; the ranks stopped after the same step (rank 0's message above says which, and what it wrote)")
	}
	e := rootCause(failed)
	msg := fmt.Sprintf("train: rank %d failed: %v", e.rank, e.err)
	if e.last != "" {
		msg += ": " + strings.TrimPrefix(e.last, "dllm: ")
	}
	return errors.New(msg)
}

// rootCause picks the failure to report among the ranks' (in the order
// their ends were seen, which may differ from the order they happened):
// not a rank the launch killed, and not one that failed in a collective
// (its peer's end ends it too) when another failed otherwise.
func rootCause(failed []rankExit) rankExit {
	killed := func(e rankExit) bool {
		var x *exec.ExitError
		if !errors.As(e.err, &x) {
			return false
		}
		ws, ok := x.Sys().(syscall.WaitStatus)
		return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	var own []rankExit
	for _, e := range failed {
		if !killed(e) {
			own = append(own, e)
		}
	}
	if len(own) == 0 {
		return failed[0]
	}
	for _, e := range own {
		if !strings.Contains(e.last, "torch: dist:") {
			return e
		}
	}
	return own[0]
}

// withoutDistEnv drops the variables a launch sets for its ranks.
func withoutDistEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
			"TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// lineWriter writes whole lines to w, each after prefix, and remembers the
// last non-empty one (a failed rank's error; read it after the process and
// the copying of its output have ended).
type lineWriter struct {
	w      io.Writer
	prefix string
	mu     *sync.Mutex // shared by the ranks' writers
	buf    []byte
	last   string
}

func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.buf = append(lw.buf, p...)
	for {
		i := bytes.IndexByte(lw.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		lw.line(lw.buf[:i])
		lw.buf = lw.buf[i+1:]
	}
}

func (lw *lineWriter) line(b []byte) {
	// A progress bar redraws with carriage returns: the line is what
	// follows the last one.
	if i := bytes.LastIndexByte(b, '\r'); i >= 0 {
		b = b[i+1:]
	}
	lw.mu.Lock()
	fmt.Fprintf(lw.w, "%s%s\n", lw.prefix, b)
	lw.mu.Unlock()
	if s := strings.TrimSpace(string(b)); s != "" {
		lw.last = s
	}
}

// flush writes an unfinished last line.
func (lw *lineWriter) flush() {
	if len(lw.buf) > 0 {
		lw.line(lw.buf)
		lw.buf = nil
	}
}
