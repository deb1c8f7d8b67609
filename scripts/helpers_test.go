package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// scriptRoot returns the repository's root for a test that runs one of its
// scripts, with bin/dllm made current (the script uses it as it finds it,
// and the shim's ABI may have moved on since it was built). It skips the
// test with -short, without one of tools, or without a libtorch shim.
func scriptRoot(t *testing.T, tools ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short")
	}
	for _, tool := range append([]string{"bash", "make"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "bin", "libdllmtorch.so")); err != nil {
		t.Skip("no libtorch shim (make shim)")
	}
	mk := exec.Command("make", "--no-print-directory", "dllm")
	mk.Dir = root
	if b, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make dllm: %v\n%s", err, b)
	}
	return root
}
