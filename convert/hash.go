package convert

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

// hashFile returns the sha256 of a file, reading the next block while the
// last is hashed, so the time is that of the slower of the two, not their
// sum (sha256 runs at about 1 GB/s per core with SHA-NI, less than a
// page-cache or NVMe read gives).
func hashFile(ctx context.Context, path string, prog *progress) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	err = pipe(ctx, blockSize, func(buf []byte) (int, error) {
		return readBlock(f, buf)
	}, func(b []byte) error {
		h.Write(b)
		prog.add(len(b))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hashing %s: %w", path, err)
	}
	return h.Sum(nil), nil
}

// hashFiles hashes several files at once, one per CPU at most, for
// sharded checkpoints.
func hashFiles(ctx context.Context, paths []string, prog *progress) (map[string][]byte, error) {
	sums := make(map[string][]byte, len(paths))
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, path := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			sum, err := hashFile(ctx, path, prog)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			sums[path] = sum
		}()
	}
	wg.Wait()
	return sums, first
}

// checkpointSHA256 names a checkpoint by the sha256 of its weights: for one
// file its plain sha256 (what `sha256sum model.safetensors` prints), for
// shards the sha256 of `sha256sum` output over them in name order, so both
// can be checked with coreutils.
func checkpointSHA256(shards []string, sums map[string][]byte) string {
	if len(shards) == 1 {
		return hex.EncodeToString(sums[shards[0]])
	}
	h := sha256.New()
	for _, s := range shards {
		fmt.Fprintf(h, "%x  %s\n", sums[s], filepath.Base(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fingerprint is --hash=fast: the sha256 of each shard's name, size and
// safetensors header, which reads kilobytes instead of gigabytes. It tells
// checkpoints of different tensors or layouts apart, not ones whose values
// were changed in place.
func fingerprint(shards []string) (string, error) {
	h := sha256.New()
	for _, s := range shards {
		if err := fingerprintFile(h, s); err != nil {
			return "", fmt.Errorf("fingerprinting %s: %w", s, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fingerprintFile(h hash.Hash, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	// The header was validated when the checkpoint was opened, so its
	// length prefix can be trusted here.
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return err
	}
	fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(path), info.Size())
	h.Write(n[:])
	_, err = io.CopyN(h, f, int64(binary.LittleEndian.Uint64(n[:])))
	return err
}
