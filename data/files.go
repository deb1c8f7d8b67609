package data

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// FileInfo identifies one source file in the manifest.
type FileInfo struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	Format string `json:"format"`
}

// formatOf picks a file's format from its name for FormatAuto.
func formatOf(path, configured string) (string, error) {
	if configured != FormatAuto {
		return configured, nil
	}
	name := strings.ToLower(filepath.Base(path))
	name = strings.TrimSuffix(name, ".gz")
	switch filepath.Ext(name) {
	case ".parquet", ".pq":
		return FormatParquet, nil
	case ".arrow", ".feather", ".ipc", ".arrows":
		return FormatArrow, nil
	case ".jsonl", ".json", ".ndjson":
		return FormatJSONL, nil
	}
	return "", fmt.Errorf("%s: cannot tell the format from the name; set format: parquet, arrow or jsonl", path)
}

// expandPaths resolves a source's paths (files, directories, globs) to a
// sorted, de-duplicated list of absolute file paths with their formats.
func expandPaths(src SourceConfig) ([]FileInfo, error) {
	seen := map[string]bool{}
	var files []FileInfo
	add := func(p string) error {
		abs, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		if seen[abs] {
			return nil
		}
		format, err := formatOf(abs, src.Format)
		if err != nil {
			return err
		}
		seen[abs] = true
		files = append(files, FileInfo{Path: abs, Format: format})
		return nil
	}
	for _, pattern := range src.Paths {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			return nil, fmt.Errorf("source %q: path %q: %w", src.Name, pattern, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("source %q: path %q matches no file", src.Name, pattern)
		}
		sort.Strings(matches)
		for _, m := range matches {
			info, err := os.Stat(m)
			if err != nil {
				return nil, fmt.Errorf("source %q: %w", src.Name, err)
			}
			if !info.IsDir() {
				if err := add(m); err != nil {
					return nil, fmt.Errorf("source %q: %w", src.Name, err)
				}
				continue
			}
			entries, err := os.ReadDir(m)
			if err != nil {
				return nil, fmt.Errorf("source %q: %w", src.Name, err)
			}
			n := 0
			for _, e := range entries {
				p := filepath.Join(m, e.Name())
				if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
					continue
				}
				if _, err := formatOf(p, src.Format); err != nil {
					continue // a README or checksum file beside the data
				}
				if err := add(p); err != nil {
					return nil, fmt.Errorf("source %q: %w", src.Name, err)
				}
				n++
			}
			if n == 0 {
				return nil, fmt.Errorf("source %q: directory %s holds no .parquet, .arrow or .jsonl file", src.Name, m)
			}
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// hashFiles fills Bytes and SHA256 of every file, workers at a time: the
// hashes tie the manifest to the exact inputs and let a resumed run
// refuse inputs that changed.
func hashFiles(files []*FileInfo, workers int) error {
	var wg sync.WaitGroup
	errs := make([]error, len(files))
	next := make(chan int)
	for w := 0; w < max(1, workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = hashFile(files[i])
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func hashFile(fi *FileInfo) error {
	f, err := os.Open(fi.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("hash %s: %w", fi.Path, err)
	}
	fi.Bytes, fi.SHA256 = n, hex.EncodeToString(h.Sum(nil))
	return nil
}

// sha256File hashes a file that may be absent ("" then).
func sha256File(path string) (string, error) {
	fi := FileInfo{Path: path}
	if err := hashFile(&fi); err != nil {
		if os.IsNotExist(err) {
			return "", nil
		}
		return "", err
	}
	return fi.SHA256, nil
}
