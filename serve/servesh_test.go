package serve

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"dllm/torch"
)

// serveShRoot is a copy of the repository's layout for serve.sh to run
// from, with the test's binary and the shim in bin/, so that it builds
// nothing, and the demo model.
func serveShRoot(t *testing.T) string {
	t.Helper()
	bin := needBinary(t)
	root := t.TempDir()
	script, err := os.ReadFile(filepath.Join("..", "serve.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "serve.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	demo, err := filepath.Abs(filepath.Join("..", "models", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"bin/dllm": bin, "bin/libdllmtorch.so": torch.ShimPath(), "models/demo": demo} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(link)), 0o755)
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestServeShAPIKey: serve.sh hands DLLM_API_KEY to the server: without
// the key only /health answers.
func TestServeShAPIKey(t *testing.T) {
	root := serveShRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(filepath.Join(root, "serve.sh"), "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--device", "cpu", "--dtype", "f32")
	cmd.Env = append(os.Environ(), "DLLM_HOME="+filepath.Join(root, "home"), "DLLM_MODEL=", "DLLM_TORCH_LIB=", "DLLM_API_KEY=sk-sh")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after a minute:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for auth, want := range map[string]int{"": 401, "Bearer nope": 401, "Bearer sk-sh": 200} {
		req, _ := http.NewRequest("GET", url+"/v1/models", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: %d, want %d", auth, resp.StatusCode, want)
		}
	}
}

// TestServeShPortTaken: with the port held by another HTTP server that
// answers /health, serve.sh must not report that server as its own: it
// exits non-zero, saying the port is in use, and prints no ready line.
func TestServeShPortTaken(t *testing.T) {
	root := serveShRoot(t)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(other, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"status":"ok"}`)) }))
	defer other.Close()
	port := other.Addr().(*net.TCPAddr).Port

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "serve.sh"), "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--device", "cpu", "--dtype", "f32")
	cmd.Env = append(os.Environ(), "DLLM_HOME="+filepath.Join(root, "home"), "DLLM_MODEL=", "DLLM_TORCH_LIB=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("serve.sh still running after 2 minutes:\n%s", out.String())
	}
	if err == nil {
		t.Fatalf("serve.sh exited 0 with its port taken:\n%s", out.String())
	}
	if strings.Contains(out.String(), "ready:") || strings.Contains(out.String(), "msg=ready") {
		t.Errorf("serve.sh reported ready while another program held the port:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "already in use") {
		t.Errorf("no word of the port being in use:\n%s", out.String())
	}
}

// TestServeRefusesDamagedWeights: `dllm serve` on a converted model one of
// whose weight bits has flipped since conversion exits non-zero, saying
// so, instead of serving it.
func TestServeRefusesDamagedWeights(t *testing.T) {
	bin := needBinary(t)
	dir := filepath.Join(t.TempDir(), "tiny")
	if out, err := exec.Command(bin, "convert", "--from", tinyDir, "--out", dir, "--block-size", "4", "--hash", "full").CombinedOutput(); err != nil {
		t.Fatalf("convert: %v\n%s", err, out)
	}
	// A new file in place of the (perhaps hard-linked) converted one, so
	// that the fixture itself is left alone.
	path := filepath.Join(dir, "model.safetensors")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-5] ^= 0x10
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--model", dir, "--host", "127.0.0.1", "--port", "0", "--device", "cpu", "--dtype", "f32")
	cmd.Env = append(os.Environ(), "DLLM_TORCH_LIB="+torch.ShimPath())
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil || err == nil {
		t.Fatalf("serve on damaged weights: %v (want a non-zero exit)\n%s", err, out)
	}
	if !strings.Contains(string(out), "damaged") || !strings.Contains(string(out), "sha256") {
		t.Errorf("no word of the damage:\n%s", out)
	}
}
