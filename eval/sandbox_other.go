//go:build !linux

package eval

import (
	"errors"
	"os/exec"
	"syscall"
)

// sandboxAttr: the namespaces are Linux's; elsewhere only an unsafe run.
func sandboxAttr(isolate bool) (*syscall.SysProcAttr, error) {
	if isolate {
		return nil, errors.New("isolating programs needs Linux's namespaces; --unsafe-exec runs them without")
	}
	return nil, nil
}

// kill ends the launcher (its children are on their own here).
func kill(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
