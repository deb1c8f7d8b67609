//go:build unix

package data

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps path read-only; shards are read far more often than their
// size allows copying.
func mapFile(path string) ([]byte, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := info.Size()
	if size < HeaderSize {
		// Too small to map usefully (and mapping 0 bytes fails); let the
		// header check report it.
		return readFileAll(path)
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file of %d bytes is too large to map", size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return readFileAll(path)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
