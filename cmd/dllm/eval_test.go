package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"dllm/eval"
	"dllm/serve"
	"dllm/synth"
	"dllm/torch"
)

// runCmds runs `dllm args...` with the given commands.
func runCmds(t *testing.T, cmds []*cli.Command, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.Command{Name: "dllm", Writer: &out, ErrWriter: &errOut, Commands: cmds}
	err := app.Run(context.Background(), append([]string{"dllm"}, args...))
	return out.String(), errOut.String(), err
}

func TestDataSynthCommand(t *testing.T) {
	dir := t.TempDir()
	out, _, err := runCmds(t, []*cli.Command{dataCommand()}, "data", "synth", "--out", dir, "--tasks", "add, mcq", "--train", "30", "--heldout", "5", "--seed", "3")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"add    train     30  dev    0  held-out     5  chance 0.00  answer number", "mcq", "chance 0.25  answer letter", "dllm eval --server URL --tasks"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	items, err := eval.LoadItems(filepath.Join(dir, synth.HeldoutFile))
	if err != nil || len(items) != 10 {
		t.Fatalf("held-out: %d items, %v", len(items), err)
	}
	b, err := os.ReadFile(filepath.Join(dir, synth.TrainFile))
	if err != nil || bytes.Count(b, []byte("\n")) != 60 || !bytes.Contains(b, []byte(`"reasoning_content":"`)) {
		t.Fatalf("train.jsonl: %v\n%.300s", err, b)
	}
	// The second set at the CPU size, with a dev split and stories.
	dir2 := t.TempDir()
	out, _, err = runCmds(t, []*cli.Command{dataCommand()}, "data", "synth", "--out", dir2, "--size", "cpu", "--train", "20", "--dev", "4", "--heldout", "3", "--text", "5")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"size cpu", "code   train     20  dev    4  held-out     3  chance 0.00  answer program", "text   5 stories"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for file, n := range map[string]int{synth.DevFile: 20, synth.HeldoutFile: 15} {
		if items, err := eval.LoadItems(filepath.Join(dir2, file)); err != nil || len(items) != n {
			t.Fatalf("%s: %d items, %v", file, len(items), err)
		}
	}
	for _, bad := range [][]string{{"--tasks", "add,chess"}, {"--tasks", " , "}, {"--train", "0", "--heldout", "0"}, {"--size", "tpu"}, {"--tasks", "v1,add"}} {
		args := append([]string{"data", "synth", "--out", t.TempDir()}, bad...)
		if _, _, err := runCmds(t, []*cli.Command{dataCommand()}, args...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestEvalCommandAgainstServe: the tiny random model served in-process,
// scored on a few synthetic items through the real HTTP API; it answers
// gibberish, so only the plumbing is checked: every item asked, usage.dllm
// read (TPF), the JSON written, the baseline comparison.
func TestEvalCommandAgainstServe(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Skip(err)
	}
	tmp := t.TempDir()
	mdir := filepath.Join(tmp, "tiny-dllm")
	if _, _, err := runCmds(t, []*cli.Command{convertCommand()}, "convert", "--from", convertFixture, "--out", mdir, "--block-size", "4", "--hash", "fast"); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(tmp, "synth")
	if _, _, err := runCmds(t, []*cli.Command{dataCommand()}, "data", "synth", "--out", data, "--tasks", "add,mcq", "--train", "1", "--heldout", "3"); err != nil {
		t.Fatal(err)
	}
	url := startServe(t, mdir)
	res := filepath.Join(tmp, "results.json")
	stdout, stderr, err := runCmds(t, []*cli.Command{evalCommand()}, "eval", "--server", url, "--tasks", filepath.Join(data, synth.HeldoutFile),
		"--limit", "2", "--max-tokens", "8", "--concurrency", "2", "--out", res, "--threshold", "0.5")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "TPF") || !strings.Contains(stdout, "mcq") || !strings.Contains(stderr, "eval: 4/4") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	rep, err := eval.ReadReport(res)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Overall.N != 4 || rep.Overall.Errors != 0 || rep.Overall.TPF == nil || rep.Model != "tiny" || rep.Tasks[1].Chance != 0.25 {
		b, _ := json.MarshalIndent(rep.Tasks, "", " ")
		t.Errorf("report: %s", b)
	}
	// Against itself as the baseline: the table gains the normalised column.
	if stdout, _, err = runCmds(t, []*cli.Command{evalCommand()}, "eval", "--server", url, "--tasks", filepath.Join(data, synth.HeldoutFile),
		"--limit", "1", "--max-tokens", "4", "--baseline", res); err != nil || !strings.Contains(stdout, "baseline") {
		t.Errorf("with --baseline: %v\n%s", err, stdout)
	}
	// The benchmarks from their files (fixtures in their formats), scored
	// and normalised to the table; LiveCodeBench's sandbox is checked and
	// the replies' programs tested (the tiny model writes none).
	suites, tasks := "math-500,gpqa-diamond", []string{"math_500", "gpqa_diamond"}
	if _, err := exec.LookPath("python3"); err == nil {
		suites, tasks = suites+",lcb-v6", append(tasks, "livecodebench_v6")
	}
	stdout, stderr, err = runCmds(t, []*cli.Command{evalCommand()}, "eval", "--server", url, "--suite", suites, "--data", "../../eval/testdata/suites",
		"--limit", "1", "--max-tokens", "8", "--unsafe-exec")
	if err != nil || !strings.Contains(stdout, "normalised") {
		t.Errorf("--suite %s: %v\n%s\n%s", suites, err, stdout, stderr)
	}
	for _, task := range tasks {
		if !strings.Contains(stdout, task) {
			t.Errorf("--suite %s: no %s in\n%s", suites, task, stdout)
		}
	}
}

func TestEvalCommandErrors(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := runCmds(t, []*cli.Command{dataCommand()}, "data", "synth", "--out", dir, "--train", "1", "--heldout", "1"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, synth.HeldoutFile)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unreachable", []string{"--server", dead, "--tasks", file, "--retries", "0"}, "cannot reach"},
		{"missing file", []string{"--tasks", filepath.Join(dir, "nope.jsonl")}, "no such file"},
		{"bad extra", []string{"--tasks", file, "--extra", "[1]"}, "--extra"},
		{"bad threshold", []string{"--tasks", file, "--threshold", "2"}, "--threshold"},
		{"bad concurrency", []string{"--tasks", file, "--concurrency", "0"}, "--concurrency"},
		{"bad top-p", []string{"--tasks", file, "--top-p", "1.5"}, "--top-p"},
		{"bad window", []string{"--suite", "lcb-v6", "--lcb-window", "2025-05-01"}, "--lcb-window"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runCmds(t, []*cli.Command{evalCommand()}, append([]string{"eval"}, c.args...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// startServe serves the model directory dir (on the CPU, as "tiny") on a
// free port until the test ends, and returns its URL once it is healthy.
func startServe(t *testing.T, dir string) string {
	t.Helper()
	checked, err := serve.Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cfg := serve.Config{ModelName: "tiny", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		done <- serve.Run(ctx, ln, cfg, func(ctx context.Context) (*serve.Model, error) {
			return checked.Load(ctx, serve.LoadOptions{Device: torch.CPU, DType: torch.Float32})
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the server did not stop")
		}
	})
	url := "http://" + ln.Addr().String()
	waitHealthy(t, url)
	return url
}

// waitHealthy polls /health until the server has loaded its model.
func waitHealthy(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the server did not become ready in 60 s")
}

// TestEvalSummaryGate: --gate fails naming each task under it and its
// file, passes a teacher that knows every task, and refuses a gate that
// is not an accuracy.
func TestEvalSummaryGate(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, word float64) string {
		r := &eval.Report{
			Tasks:   []eval.TaskSummary{{Task: "sum", N: 100, Accuracy: 1}, {Task: "word", N: 100, Accuracy: word}},
			Overall: eval.TaskSummary{Task: "all", N: 200, Accuracy: (1 + word) / 2},
		}
		p := filepath.Join(dir, name)
		if err := r.WriteJSON(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, weak := write("teacher-dev-t0.json", 0.91), write("teacher-dev-t1.json", 0.86)
	cmds := []*cli.Command{evalCommand()}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--gate", "0.9", good}, ""},
		{[]string{"--brief", "--gate", "0.9", good, weak}, "under the gate of 0.9: word 0.86 (" + weak + ")"},
		{[]string{"--gate", "0.8", good, weak}, ""},
		{[]string{weak}, ""},
		{[]string{"--gate", "90", good}, "--gate is an accuracy between 0 and 1, not 90"},
	} {
		out, _, err := runCmds(t, cmds, append([]string{"eval", "summary"}, tc.args...)...)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.wantErr)
		case tc.wantErr == "" && out == "":
			t.Errorf("%v: no summary printed", tc.args)
		}
	}
}
