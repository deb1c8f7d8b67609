package eval

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testSandbox is a sandbox with short limits, or a skip where this machine
// cannot run one (no python3; no namespaces when isolated).
func testSandbox(t *testing.T, unsafe bool) *Sandbox {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on this machine")
	}
	s := &Sandbox{Python: "python3", Timeout: time.Second, Memory: 512 << 20, Unsafe: unsafe}
	if !unsafe {
		_, err := s.Check(context.Background(), "print(1)", &CodeTests{Cases: []TestCase{{Input: "", Output: "1"}}})
		if errors.Is(err, ErrSandbox) && strings.Contains(err.Error(), "namespaces") {
			t.Skipf("this machine refuses the sandbox's namespaces: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

var stdinTwice = &CodeTests{Cases: []TestCase{{Input: "3\n", Output: "6\n"}, {Input: "10\n", Output: "20"}}}

// Programs are judged as lcb_runner judges them: stdin programs by their
// output (lines stripped; a differing line equal as Decimals), calls by
// ==, a stop at the first failure, errors and limits as failures.
func TestSandboxVerdicts(t *testing.T) {
	call := &CodeTests{FuncName: "twoSum", Cases: []TestCase{
		{Input: "[2,7,11,15]\n9", Output: "[0, 1]"},
		{Input: "[3,2,4]\n6", Output: "[1,2]"},
	}}
	cases := []struct {
		name   string
		code   string
		tests  *CodeTests
		status string
		passed int
		detail string
	}{
		{"stdin", "n = int(input())\nprint(n * 2)", stdinTwice, "pass", 2, ""},
		{"stdin main guard and sys.stdin", "import sys\ndef main():\n    print(2 * int(sys.stdin.buffer.read()))\nif __name__ == '__main__':\n    main()", stdinTwice, "pass", 2, ""},
		{"header imports", "print(floor(int(input()) * 2.0))", stdinTwice, "pass", 2, ""},
		{"wrong on the second test", "n = int(input())\nprint(6)", stdinTwice, "wrong", 1, "got '6\\n', want '20'"},
		{"Decimal tokens", "print(' 1.0  2 ')\nprint('1e2')", &CodeTests{Cases: []TestCase{{Input: "", Output: "1 2.00\n100\n"}}}, "pass", 1, ""},
		{"a line too many", "print(1)\nprint(2)", &CodeTests{Cases: []TestCase{{Input: "", Output: "1"}}}, "wrong", 0, ""},
		{"exit counts as finishing", "print(6)\nexit(0)", &CodeTests{Cases: []TestCase{{Input: "", Output: "6"}}}, "pass", 1, ""},
		{"runtime error", "print(1 // 0)", stdinTwice, "error", 0, "ZeroDivisionError"},
		{"syntax error", "def f(:\n  pass", stdinTwice, "error", 0, "SyntaxError"},
		{"class Solution, tuple result", "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n                return (seen[target - x], i)\n            seen[x] = i", call, "pass", 2, ""},
		{"a top-level function", "def twoSum(nums, target):\n    return [0, 1]", call, "wrong", 1, "got [0, 1], want [1, 2]"},
		{"no such method", "class Solution:\n    pass", call, "error", 0, "AttributeError"},
		{"the expected outputs are not readable", "print(open('tests.json').read())", stdinTwice, "error", 0, "FileNotFoundError"},
		{"infinite loop", "while True:\n    pass", stdinTwice, "timeout", 0, ""},
		{"infinite loop in a call", "class Solution:\n    def twoSum(self, nums, target):\n        while True:\n            pass", call, "timeout", 0, ""},
		{"fork bomb", "import os\nwhile True:\n    os.fork()", stdinTwice, "error", 0, "TypeError"},
		{"subprocess", "import subprocess\nsubprocess.run(['sh', '-c', 'echo hi'])", stdinTwice, "error", 0, "TypeError"},
		{"memory bomb", "x = bytearray(8 << 30)\nprint(len(x))", stdinTwice, "error", 0, "MemoryError"},
		{"files in its own directory", "open('x.txt', 'w').write(input())\nprint(2 * int(open('x.txt').read()))", stdinTwice, "pass", 2, ""},
	}
	for _, unsafe := range []bool{false, true} {
		s := testSandbox(t, unsafe)
		for _, c := range cases {
			t0 := time.Now()
			v, err := s.Check(context.Background(), c.code, c.tests)
			if err != nil {
				t.Fatalf("unsafe=%v %s: %v", unsafe, c.name, err)
			}
			if v.Status != c.status || v.Passed != c.passed || v.Total != len(c.tests.Cases) || !strings.Contains(v.Detail, c.detail) {
				t.Errorf("unsafe=%v %s: %+v, want %s with %d passed, detail %q", unsafe, c.name, v, c.status, c.passed, c.detail)
			}
			if el := time.Since(t0); el > 5*time.Second {
				t.Errorf("unsafe=%v %s: took %s", unsafe, c.name, el)
			}
		}
	}
}

// Isolated, a program reaches no network, not even loopback, and cannot
// write outside its own directory.
func TestSandboxIsolation(t *testing.T) {
	s := testSandbox(t, false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan bool, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- true
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	outside := filepath.Join(t.TempDir(), "escaped.txt")
	for _, c := range []struct{ name, code, detail string }{
		{"network", "import socket\nsocket.create_connection(('127.0.0.1', " + strconv.Itoa(port) + "), 2)\nprint(6)", "OSError"},
		{"write outside", "open(" + quote(outside) + ", 'w').write('x')\nprint(6)", "Read-only file system"},
		{"write to /tmp", "open('/tmp/dllm-escaped', 'w').write('x')\nprint(6)", "Read-only file system"},
	} {
		v, err := s.Check(context.Background(), c.code, stdinTwice)
		if err != nil {
			t.Fatal(err)
		}
		if v.Status != "error" || !strings.Contains(v.Detail, c.detail) {
			t.Errorf("%s: %+v, want an error with %q", c.name, v, c.detail)
		}
	}
	select {
	case <-accepted:
		t.Error("the program connected to the host's loopback")
	default:
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Errorf("%s was written (%v)", outside, err)
	}
}

// The sandbox's own failures are errors, not wrong answers.
func TestSandboxErrors(t *testing.T) {
	s := &Sandbox{Python: "no-such-python-dllm", Timeout: time.Second}
	if _, err := s.Check(context.Background(), "print(1)", stdinTwice); !errors.Is(err, ErrSandbox) || !strings.Contains(err.Error(), "--python") {
		t.Errorf("missing interpreter: %v", err)
	}
	s = testSandbox(t, true)
	if _, err := s.Check(context.Background(), "print(1)", &CodeTests{}); !errors.Is(err, ErrSandbox) {
		t.Errorf("no cases: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := s.Check(ctx, "while True:\n    pass", stdinTwice); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled: %v", err)
	}
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }

// Nothing a program starts outlives its run, even a process forked behind
// the guard's back.
func TestSandboxLeavesNothing(t *testing.T) {
	code := "import ctypes, time\nif ctypes.CDLL(None).fork() == 0:\n    time.sleep(60)\nprint(2 * int(input()))"
	for _, unsafe := range []bool{false, true} {
		s := testSandbox(t, unsafe)
		v, err := s.Check(context.Background(), code, stdinTwice)
		if err != nil || v.Status != "pass" {
			t.Fatalf("unsafe=%v: %+v, %v", unsafe, v, err)
		}
		time.Sleep(100 * time.Millisecond)
		if left := sandboxProcesses(); len(left) > 0 {
			t.Errorf("unsafe=%v: still running: %v", unsafe, left)
		}
	}
}

// sandboxProcesses are the running processes of a sandbox launcher (whose
// command line names its dllm-code- directory), forks included.
func sandboxProcesses() []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), "dllm-code-") {
			if st, err := os.ReadFile(filepath.Join(filepath.Dir(f), "stat")); err == nil && !strings.Contains(string(st), ") Z ") {
				out = append(out, filepath.Base(filepath.Dir(f)))
			}
		}
	}
	return out
}
