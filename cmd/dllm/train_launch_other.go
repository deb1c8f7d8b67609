//go:build !linux

package main

import "syscall"

// rankProcAttr is the default: only Linux can tie a rank's life to its
// launcher's.
func rankProcAttr() *syscall.SysProcAttr { return nil }
