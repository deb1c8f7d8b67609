//go:build !unix

package data

// mapFile reads the whole file where mmap is not available.
func mapFile(path string) ([]byte, func() error, error) { return readFileAll(path) }
