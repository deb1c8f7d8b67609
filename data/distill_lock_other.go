//go:build !unix

package data

import "os"

// lockFile creates path if missing; other systems get no lock, so two runs
// into one output must be avoided by hand there.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}
