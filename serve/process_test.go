package serve

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"dllm/torch"
)

// Tests that run the real dllm binary share one build per test binary.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// needBinary skips a test of the real server under -short or without the
// libtorch shim, and otherwise returns the dllm binary, built once.
func needBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short")
	}
	if err := torch.Load(); err != nil {
		if strings.Contains(err.Error(), "not found") {
			t.Skipf("no libtorch shim (make shim): %v", err)
		}
		t.Fatal(err)
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "dllm-serve-test-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "dllm")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", binPath, "./cmd/dllm")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = &buildError{err, string(out)}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build ./cmd/dllm: " + e.err.Error() + "\n" + e.out }

// tinyModelDir converts testdata/tiny-llama (block size 4) into a temporary
// model directory with the binary.
func tinyModelDir(t *testing.T, bin string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	cmd := exec.Command(bin, "convert", "--from", tinyDir, "--out", dir, "--block-size", "4", "--hash", "fast")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("convert: %v\n%s", err, out)
	}
	return dir
}

// serverProc is a running `dllm serve` on the tiny model, listening on a
// free loopback port. Its log is scanned as it comes: panics and error
// lines are counted and the last lines kept (a load test logs a lot).
type serverProc struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{} // closed when the log ends (the process exited)

	mu     sync.Mutex
	tail   []string
	panics int
	errors int
	exited bool
}

// startServer starts the binary's server on model with extra flags and
// waits until /health answers 200. It is killed when the test ends unless
// the test waited for it.
func startServer(t *testing.T, bin, model string, args ...string) *serverProc {
	t.Helper()
	args = append([]string{"serve", "--model", model, "--host", "127.0.0.1", "--port", "0", "--device", "cpu", "--dtype", "f32"}, args...)
	p := &serverProc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "DLLM_TORCH_LIB="+torch.ShimPath())
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		if !exited {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	urlc := make(chan string, 1)
	go p.scan(stderr, urlc)
	select {
	case p.url = <-urlc:
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not start listening:\n%s", p.log())
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.url + "/health")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy after 60 s:\n%s", p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var urlPattern = regexp.MustCompile(`url=(http://\S+)`)

func (p *serverProc) scan(r io.Reader, urlc chan<- string) {
	defer close(p.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		if strings.Contains(line, "panic") {
			p.panics++
		}
		if strings.Contains(line, "level=ERROR") {
			p.errors++
		}
		if p.panics+p.errors > 0 && p.panics+p.errors <= 20 && (strings.Contains(line, "panic") || strings.Contains(line, "level=ERROR")) {
			p.tail = append(p.tail, "!! "+line) // keep the first problems whatever follows
		}
		p.tail = append(p.tail, line)
		if len(p.tail) > 400 {
			p.tail = append(p.tail[:0], p.tail[len(p.tail)-200:]...)
		}
		p.mu.Unlock()
		if m := urlPattern.FindStringSubmatch(line); m != nil {
			select {
			case urlc <- m[1]:
			default:
			}
		}
	}
}

// log is the end of the server's log.
func (p *serverProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// stop sends SIGTERM and waits (at most limit) for the process to exit;
// it returns the exit error (nil for status 0) and how long it took.
func (p *serverProc) stop(t *testing.T, limit time.Duration) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { <-p.done; waited <- p.cmd.Wait() }()
	select {
	case err := <-waited:
		p.mu.Lock()
		p.exited = true
		p.mu.Unlock()
		return err, time.Since(start)
	case <-time.After(limit):
		t.Fatalf("server still running %v after SIGTERM:\n%s", limit, p.log())
	}
	return nil, 0
}
