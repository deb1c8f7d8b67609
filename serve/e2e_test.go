package serve

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2E starts `dllm serve` on the tiny random test model and runs
// test/e2e/serve.test.mjs with the official openai npm client against it
// (the protocol: that model's text is gibberish) with an API key, then stops the server
// with SIGTERM and expects exit status 0. It needs node (npm installs the
// client when test/e2e/node_modules is missing) and the libtorch shim; it
// is skipped with -short.
func TestE2E(t *testing.T) {
	nodeTest := needNode(t)
	bin := needBinary(t)
	// With an API key, from a file as a deployment would keep it.
	const key = "sk-e2e-key"
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServer(t, bin, tinyModelDir(t, bin), "--served-model-name", "tiny-e2e", "--max-queue", "4", "--api-key-file", keyFile)
	nodeTest(p, "serve.test.mjs", "tiny-e2e", "DLLM_API_KEY="+key)

	// The server survived everything the client did, and stops cleanly.
	resp, err := http.Get(p.url + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health after the client: %v %v\n%s", resp, err, p.log())
	}
	resp.Body.Close()
	if err, _ := p.stop(t, 20*time.Second); err != nil {
		t.Fatalf("server exit after SIGTERM: %v\n%s", err, p.log())
	}
	for _, want := range []string{"status=499", "status=400", "status=401", "status=404", "msg=stopped"} {
		if !strings.Contains(p.log(), want) {
			t.Errorf("server log lacks %q:\n%s", want, p.log())
		}
	}
}

// TestE2EDemo serves the built-in demo model (models/demo: the CPU proxy's
// diffusion model, docs/proxy.md) as ./serve.sh does without a model and
// runs test/e2e/demo.test.mjs: it answers held-out questions of the
// proxy's five task families right, streamed and not, through the openai
// client.
func TestE2EDemo(t *testing.T) {
	nodeTest := needNode(t)
	bin := needBinary(t)
	p := startServer(t, bin, filepath.Join("..", "models", "demo"), "--served-model-name", "demo")
	nodeTest(p, "demo.test.mjs", "demo")
}

// TestE2EBatch serves the demo model with --max-num-seqs 4 and runs
// test/e2e/batch.test.mjs: sixteen greedy requests at once, half
// streamed, get the replies they get alone, and they shared forwards;
// eight sampled ones (two ways of sampling, each with its seed) too.
func TestE2EBatch(t *testing.T) {
	nodeTest := needNode(t)
	bin := needBinary(t)
	p := startServer(t, bin, filepath.Join("..", "models", "demo"), "--served-model-name", "demo", "--max-num-seqs", "4")
	nodeTest(p, "batch.test.mjs", "demo", "DLLM_MAX_NUM_SEQS=4")
}

// needNode skips the test without a node new enough for the openai client
// and returns a function that runs one of test/e2e's files against a
// server (installing the client first when test/e2e/node_modules lacks it).
func needNode(t *testing.T) func(p *serverProc, file, model string, env ...string) {
	t.Helper()
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
	dir, err := filepath.Abs(filepath.Join("..", "test", "e2e"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	npmInstall := make(chan error, 1)
	go func() { npmInstall <- ensureNodeModules(ctx, dir) }()
	return func(p *serverProc, file, model string, env ...string) {
		t.Helper()
		if err := <-npmInstall; err != nil {
			t.Fatalf("installing the openai client: %v", err)
		}
		cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", file)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), "DLLM_BASE_URL="+p.url+"/v1", "DLLM_MODEL="+model), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node --test %s: %v\n%s\nserver log:\n%s", file, err, out, p.log())
		}
		t.Logf("node --test %s:\n%s", file, out)
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
