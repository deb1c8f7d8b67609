//go:build !dllm_fault

package train

// faultExit: product builds inject no faults (fault.go, for tests).
func faultExit(int) (int, error) { return 0, nil }
