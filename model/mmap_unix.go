//go:build unix

package model

import (
	"fmt"
	"math"
	"os"
	"syscall"
)

// mapFile maps the whole file read-only. MAP_SHARED keeps the pages in the
// page cache shared with every other reader of the checkpoint instead of
// private anonymous memory.
func mapFile(f *os.File, size int64) ([]byte, func([]byte) error, error) {
	if size <= 0 || size > math.MaxInt {
		return nil, nil, fmt.Errorf("cannot map %d bytes", size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return data, syscall.Munmap, nil
}
