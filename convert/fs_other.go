//go:build !linux

package convert

import (
	"errors"
	"os"
)

var errUnsupported = errors.New("not supported on this system")

// placeFile hard-links src to dst; reflinks are Linux-only here.
func placeFile(src, dst string) (Action, error) {
	if err := os.Link(src, dst); err != nil {
		return "", err
	}
	return Link, nil
}

// sameDevice is unknown here; false makes the space check conservative.
func sameDevice(a, b string) bool { return false }

// freeBytes is unknown here.
func freeBytes(dir string) int64 { return -1 }

// exchange is unavailable here; the caller falls back to two renames.
func exchange(a, b string) error { return errUnsupported }
