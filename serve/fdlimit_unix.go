//go:build unix

package serve

import "syscall"

// raiseOpenFileLimit lifts the soft limit on open descriptors to the hard
// one and returns it (0 if unknown). Go does this for itself at start-up
// since 1.19; doing it here as well keeps the figure the connection limit
// is sized from right whatever started the process.
func raiseOpenFileLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = raised.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		}
	}
	return lim.Cur
}
