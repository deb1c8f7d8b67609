package serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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

// TestE2E builds bin/dllm, converts the tiny test model, starts `dllm serve`
// on it and runs test/e2e/serve.test.mjs with the official openai npm
// client against it, then stops the server with SIGTERM and expects exit
// status 0. It needs node (npm installs the client when test/e2e/node_modules
// is missing) and the libtorch shim; it is skipped with -short.
func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (make deps installs it)")
	}
	// The openai client needs a global fetch (node 18+; it is tested on 20).
	if err := exec.Command(node, "-e", "process.exit(typeof fetch === 'function' ? 0 : 3)").Run(); err != nil {
		t.Skipf("node at %s is too old for the openai client (need 18+): %v", node, err)
	}
	if err := torch.Load(); err != nil {
		if strings.Contains(err.Error(), "not found") {
			t.Skipf("no libtorch shim (make shim): %v", err)
		}
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	e2eDir := filepath.Join(root, "test", "e2e")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	npmInstall := make(chan error, 1)
	go func() { npmInstall <- ensureNodeModules(ctx, e2eDir) }()

	tmp := t.TempDir()
	bin := needBinary(t)
	modelDir := filepath.Join(tmp, "tiny")
	run(t, ctx, root, nil, bin, "convert", "--from", "testdata/tiny-llama", "--out", modelDir, "--block-size", "4", "--hash", "fast")

	srv := exec.CommandContext(ctx, bin, "serve", "--model", modelDir, "--host", "127.0.0.1", "--port", "0",
		"--served-model-name", "tiny-e2e", "--device", "cpu", "--dtype", "f32", "--max-queue", "4")
	srv.Env = append(os.Environ(), "DLLM_TORCH_LIB="+torch.ShimPath())
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		logMu  sync.Mutex
		logBuf bytes.Buffer
	)
	urlc := make(chan string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		re := regexp.MustCompile(`url=(http://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logBuf.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			}
		}
	}()
	serverLog := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return logBuf.String()
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.Process.Kill()
			srv.Wait()
		}
	}()

	var base string
	select {
	case base = <-urlc:
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not start listening:\n%s", serverLog())
	}
	waitHealthy(t, base, serverLog)
	if err := <-npmInstall; err != nil {
		t.Fatalf("installing the openai client: %v", err)
	}

	nodeCmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "serve.test.mjs")
	nodeCmd.Dir = e2eDir
	nodeCmd.Env = append(os.Environ(), "DLLM_BASE_URL="+base+"/v1", "DLLM_MODEL=tiny-e2e")
	out, err := nodeCmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s\nserver log:\n%s", err, out, serverLog())
	}
	t.Logf("node --test:\n%s", out)

	// The server survived everything the client did, and stops cleanly.
	waitHealthy(t, base, serverLog)
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { <-logDone; waitErr <- srv.Wait() }()
	select {
	case err := <-waitErr:
		stopped = true
		if err != nil {
			t.Fatalf("server exit after SIGTERM: %v\n%s", err, serverLog())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("server still running 20 s after SIGTERM:\n%s", serverLog())
	}
	for _, want := range []string{"status=499", "status=400", "status=404", "msg=stopped"} {
		if !strings.Contains(serverLog(), want) {
			t.Errorf("server log lacks %q:\n%s", want, serverLog())
		}
	}
}

// ensureNodeModules installs test/e2e's locked dependencies when missing.
func ensureNodeModules(ctx context.Context, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err == nil {
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return errors.New("npm is not installed and test/e2e/node_modules is missing")
	}
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.New("npm ci: " + err.Error() + "\n" + string(out))
	}
	return nil
}

func run(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func waitHealthy(t *testing.T, base string, serverLog func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy after 60 s:\n%s", serverLog())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
