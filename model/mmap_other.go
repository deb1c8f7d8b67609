//go:build !unix

package model

import (
	"fmt"
	"io"
	"math"
	"os"
)

// mapFile reads the whole file where mmap is unavailable; correct, but it
// costs the host memory that mapping saves.
func mapFile(f *os.File, size int64) ([]byte, func([]byte) error, error) {
	if size <= 0 || size > math.MaxInt {
		return nil, nil, fmt.Errorf("cannot read %d bytes", size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, size), data); err != nil {
		return nil, nil, err
	}
	return data, nil, nil
}
