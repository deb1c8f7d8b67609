//go:build dllm_fault

package train

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// faultExit reads DLLM_FAULT_EXIT=RANK:STEP, the fault injection of test
// builds (go test -tags dllm_fault, which make test runs): the step after
// which this rank exits with status 3, as a crashed rank would; 0 for none.
// Product builds have none (fault_off.go).
func faultExit(rank int) (int, error) {
	f := os.Getenv("DLLM_FAULT_EXIT")
	if f == "" {
		return 0, nil
	}
	r, s, ok := strings.Cut(f, ":")
	want, err1 := strconv.Atoi(r)
	step, err2 := strconv.Atoi(s)
	if !ok || err1 != nil || err2 != nil || step < 1 {
		return 0, fmt.Errorf("DLLM_FAULT_EXIT=%q (want RANK:STEP)", f)
	}
	if want != rank {
		return 0, nil
	}
	return step, nil
}
