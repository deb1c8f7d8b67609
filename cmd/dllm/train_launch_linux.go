//go:build linux

package main

import "syscall"

// rankProcAttr makes a rank die with its launcher: killed launchers leave
// no ranks behind to train on or hold GPUs.
func rankProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
