package eval

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CodeTests are the tests a program answer must pass (LiveCodeBench's
// format): with FuncName, each case is a call of Solution().FuncName (or a
// top-level function of that name) on the input's lines, each one JSON
// argument, returning the output's JSON value; without, the program reads
// the input on stdin and must print the output.
type CodeTests struct {
	FuncName string     `json:"func_name,omitempty"`
	Cases    []TestCase `json:"cases"`
}

// TestCase is one test: an input and the expected output.
type TestCase struct {
	Input  string `json:"input"`
	Output string `json:"output"`
}

// Verdict is how a program fared on its tests.
type Verdict struct {
	// Status is pass, wrong (a wrong output), timeout or error (the
	// program failed to compile, raised, or hit a limit).
	Status string `json:"status"`
	// Passed of Total tests passed; the run stops at the first failing
	// test, Test (0-based).
	Passed int    `json:"passed"`
	Total  int    `json:"total"`
	Test   int    `json:"test"`
	Detail string `json:"detail,omitempty"`
}

// String is "passed 30/30 tests" or "wrong answer on test 4 of 30: ...".
func (v Verdict) String() string {
	what := map[string]string{"wrong": "wrong answer", "timeout": "time limit", "error": "error"}[v.Status]
	if v.Status == "pass" {
		return fmt.Sprintf("passed %d/%d tests", v.Passed, v.Total)
	}
	s := fmt.Sprintf("%s on test %d of %d", what, v.Test+1, v.Total)
	if v.Detail != "" {
		s += ": " + v.Detail
	}
	return s
}

// Sandbox runs model-written Python programs against their tests, each in
// a directory of its own that is removed afterwards. On Linux the program
// runs in new user, mount, network and PID namespaces: every file system
// is read-only to it but its directory, it has no network (not even
// loopback), and nothing it starts outlives its run. Each test's process
// gets a wall-clock timeout and limits on its memory, CPU time and file
// sizes, and lcb_runner's reliability guard (no fork, no subprocess, no
// kill, no deleting files). Unsafe drops the namespaces, for machines that
// refuse them.
type Sandbox struct {
	// Python is the interpreter (python3).
	Python string
	// Timeout is the wall-clock limit of one test (6 s, lcb_runner's).
	Timeout time.Duration
	// Memory is a test process's address-space limit in bytes (4 GiB).
	Memory int64
	// Unsafe runs programs without the namespaces: they can then reach
	// the network and write wherever the user can.
	Unsafe bool
}

// NewSandbox is a Sandbox with the defaults: python3, 6 s a test, 4 GiB.
func NewSandbox() *Sandbox {
	return &Sandbox{Python: "python3", Timeout: 6 * time.Second, Memory: 4 << 30}
}

//go:embed sandbox.py
var launcher string

// ErrSandbox marks a failure of the sandbox itself (no interpreter, no
// namespaces), as opposed to a program that fails its tests: a run stops
// on it rather than scoring every program as wrong.
var ErrSandbox = errors.New("code sandbox")

// Check runs code against tests and returns its verdict. The error is for
// the sandbox failing (wrapping ErrSandbox) or ctx ending, never for the
// program failing.
func (s *Sandbox) Check(ctx context.Context, code string, tests *CodeTests) (Verdict, error) {
	py, err := exec.LookPath(s.Python)
	if err != nil {
		return Verdict{}, fmt.Errorf("%w: the programs run with %s, which is not installed (--python): %v", ErrSandbox, s.Python, err)
	}
	if len(tests.Cases) == 0 {
		return Verdict{}, fmt.Errorf("%w: no test cases", ErrSandbox)
	}
	dir, err := os.MkdirTemp("", "dllm-code-")
	if err != nil {
		return Verdict{}, fmt.Errorf("%w: %v", ErrSandbox, err)
	}
	defer os.RemoveAll(dir)
	b, err := json.Marshal(tests)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "tests.json"), b, 0o600)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "prog.py"), []byte(code), 0o600)
	}
	if err != nil {
		return Verdict{}, fmt.Errorf("%w: %v", ErrSandbox, err)
	}
	isolate := "1"
	if s.Unsafe {
		isolate = "0"
	}
	secs := strconv.FormatFloat(s.Timeout.Seconds(), 'f', -1, 64)
	cmd := exec.Command(py, "-I", "-c", launcher, dir, isolate, secs, strconv.FormatInt(s.Memory, 10))
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, "LANG=C.UTF-8"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitedBuffer{&stdout, 1 << 20}, &limitedBuffer{&stderr, 64 << 10}
	if cmd.SysProcAttr, err = sandboxAttr(!s.Unsafe); err != nil {
		return Verdict{}, fmt.Errorf("%w: %v", ErrSandbox, err)
	}
	if err := cmd.Start(); err != nil {
		if !s.Unsafe {
			return Verdict{}, fmt.Errorf("%w: this machine does not let %s start in new user, mount, network and PID namespaces (%v); --unsafe-exec runs the programs without them, free to reach the network and write files", ErrSandbox, s.Python, err)
		}
		return Verdict{}, fmt.Errorf("%w: %v", ErrSandbox, err)
	}
	// The launcher stops each test at Timeout; this is the backstop for
	// the launcher itself, lcb_runner's budget for a whole run plus slack.
	limit := time.Duration(len(tests.Cases)+1)*(s.Timeout+time.Second) + 10*time.Second
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		kill(cmd)
		<-done
		return Verdict{}, ctx.Err()
	case <-timer.C:
		kill(cmd)
		<-done
		return Verdict{Status: "timeout", Total: len(tests.Cases), Detail: fmt.Sprintf("the run took over %s", limit)}, nil
	}
	// The launcher has exited; whatever it started dies with its PID
	// namespace, or (unsafe) with its process group.
	kill(cmd)
	line := lastLine(stdout.String())
	var v Verdict
	if err := json.Unmarshal([]byte(line), &v); err != nil || v.Status == "" {
		return Verdict{}, fmt.Errorf("%w: the launcher gave no verdict (%v): %s", ErrSandbox, waitErr, strings.TrimSpace(stderr.String()))
	}
	if v.Status == "sandbox" {
		return Verdict{}, fmt.Errorf("%w: %s; --unsafe-exec runs the programs without the namespaces", ErrSandbox, v.Detail)
	}
	return v, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// limitedBuffer keeps the first n bytes written to it and drops the rest.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
