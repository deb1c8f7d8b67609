//go:build dllm_fault

package train

import (
	"strings"
	"testing"
)

// Test builds inject a rank's failure from DLLM_FAULT_EXIT=RANK:STEP.
func TestFaultExit(t *testing.T) {
	for _, c := range []struct {
		env  string
		rank int
		want int
		err  string
	}{{"", 1, 0, ""}, {"1:2", 1, 2, ""}, {"1:2", 0, 0, ""}, {"1", 0, 0, "RANK:STEP"}, {"1:0", 1, 0, "RANK:STEP"}} {
		t.Setenv("DLLM_FAULT_EXIT", c.env)
		got, err := faultExit(c.rank)
		if got != c.want || (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q rank %d: %d, %v; want %d, %q", c.env, c.rank, got, err, c.want, c.err)
		}
	}
}
