package eval

import (
	"os"
	"os/exec"
	"syscall"
)

// sandboxAttr starts the launcher in a process group of its own, killed
// with dllm; isolated, in new user (dllm's user mapped to root, for the
// mounts), mount, network, PID and IPC namespaces.
func sandboxAttr(isolate bool) (*syscall.SysProcAttr, error) {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if isolate {
		a.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
	return a, nil
}

// kill ends the launcher's process group (and, isolated, its PID
// namespace, which dies with the launcher).
func kill(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
