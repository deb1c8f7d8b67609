package model

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// TensorData is one tensor to write. Give its bytes either in Data or, to
// stream a tensor that is not in memory as a whole (e.g. converted on the
// fly), through Stream, which must write exactly the tensor's size.
type TensorData struct {
	Name   string
	DType  DType
	Shape  []int64
	Data   []byte
	Stream func(w io.Writer) error
}

// WriteSafetensors writes tensors to path in the layout the reference
// implementation produces: data sorted by element size (largest first), then
// name, packed without gaps, so every tensor is aligned to its element size
// (the header is space-padded to a multiple of 8); header keys in data order
// with __metadata__ first. transformers refuses files whose metadata lacks
// "format", so pass {"format": "pt"} for files it should load.
//
// The file is written to path+".tmp", fsynced and renamed, so a crash never
// leaves a truncated file under the final name.
func WriteSafetensors(path string, tensors []TensorData, metadata map[string]string) error {
	return writeSafetensors(path, tensors, metadata, nil)
}

// WriteSafetensorsSHA256 is WriteSafetensors that also returns the hex
// sha256 of the file, computed from the bytes as they are written (beside
// the writes, on another core) rather than by reading the file back.
func WriteSafetensorsSHA256(path string, tensors []TensorData, metadata map[string]string) (string, error) {
	h := sha256.New()
	if err := writeSafetensors(path, tensors, metadata, h); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeSafetensors writes the file, feeding every byte to h when given.
func writeSafetensors(path string, tensors []TensorData, metadata map[string]string, h hash.Hash) (err error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: %s: "+format, append([]any{path}, args...)...)
	}
	order, sizes, err := layout(tensors)
	if err != nil {
		return fail("%v", err)
	}
	hdr, err := encodeHeader(tensors, order, sizes, metadata)
	if err != nil {
		return fail("%v", err)
	}

	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	var dst io.Writer = f
	if h != nil {
		dst = hashingWriter{f, h}
	}
	w := bufio.NewWriterSize(dst, 4<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	w.Write(lenBuf[:]) // bufio errors are sticky: Flush reports them
	w.Write(hdr)
	for _, i := range order {
		t := &tensors[i]
		if t.Stream == nil {
			if _, err := w.Write(t.Data); err != nil {
				return fail("%w", err)
			}
			continue
		}
		cw := &exactWriter{w: w, left: sizes[i]}
		if err := t.Stream(cw); err != nil {
			return fail("tensor %q: %w", t.Name, err)
		}
		if cw.left != 0 {
			return fail("tensor %q: stream wrote %d bytes, want %d", t.Name, sizes[i]-cw.left, sizes[i])
		}
	}
	if err := w.Flush(); err != nil {
		return fail("%w", err)
	}
	if err := f.Sync(); err != nil {
		return fail("%w", err)
	}
	if err := f.Close(); err != nil {
		return fail("%w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	syncDir(filepath.Dir(path))
	return nil
}

// syncDir makes the rename durable. Some filesystems refuse fsync on a
// directory; the data itself is already synced, so that is not an error.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// layout checks the tensors and returns the write order and byte sizes.
func layout(tensors []TensorData) ([]int, []int64, error) {
	sizes := make([]int64, len(tensors))
	seen := make(map[string]bool, len(tensors))
	for i, t := range tensors {
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, nil, fmt.Errorf("bad tensor name %q", t.Name)
		}
		if seen[t.Name] {
			return nil, nil, fmt.Errorf("duplicate tensor %q", t.Name)
		}
		seen[t.Name] = true
		if t.DType.Size() == 0 {
			return nil, nil, fmt.Errorf("tensor %q: invalid dtype %v", t.Name, t.DType)
		}
		n := uint64(t.DType.Size())
		for _, d := range t.Shape {
			if d < 0 {
				return nil, nil, fmt.Errorf("tensor %q: negative dimension in shape %v", t.Name, t.Shape)
			}
			hi, lo := bits.Mul64(n, uint64(d))
			if hi != 0 || lo > math.MaxInt64 {
				return nil, nil, fmt.Errorf("tensor %q: shape %v overflows", t.Name, t.Shape)
			}
			n = lo
		}
		sizes[i] = int64(n)
		if t.Stream == nil && int64(len(t.Data)) != sizes[i] {
			return nil, nil, fmt.Errorf("tensor %q: %d data bytes, but %v %v needs %d",
				t.Name, len(t.Data), t.DType, t.Shape, sizes[i])
		}
	}
	order := make([]int, len(tensors))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if d := tensors[b].DType.Size() - tensors[a].DType.Size(); d != 0 {
			return d
		}
		return cmp.Compare(tensors[a].Name, tensors[b].Name)
	})
	return order, sizes, nil
}

func encodeHeader(tensors []TensorData, order []int, sizes []int64, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // names verbatim, as Python's json writes them
	key := func(s string) {
		enc.Encode(s)
		b.Truncate(b.Len() - 1) // Encode appends a newline
		b.WriteByte(':')
	}
	b.WriteByte('{')
	if len(metadata) > 0 {
		key("__metadata__")
		if err := enc.Encode(metadata); err != nil {
			return nil, err
		}
		b.Truncate(b.Len() - 1)
		b.WriteByte(',')
	}
	var off int64
	for _, i := range order {
		t := &tensors[i]
		key(t.Name)
		b.WriteString(`{"dtype":"` + t.DType.String() + `","shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(d, 10))
		}
		if off > math.MaxInt64-sizes[i] {
			return nil, errors.New("total size overflows")
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]},`, off, off+sizes[i])
		off += sizes[i]
	}
	if b.Len() > 1 {
		b.Truncate(b.Len() - 1) // trailing comma
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > maxHeaderSize {
		return nil, errors.New("header too large")
	}
	return b.Bytes(), nil
}

// hashingWriter writes to w and feeds h the same bytes concurrently, so a
// chunk costs the slower of the write and the hash, not their sum. The
// chunks are bufio's 4 MiB (or a tensor's Data written whole), large enough
// that a goroutine per chunk costs nothing.
type hashingWriter struct {
	w io.Writer
	h hash.Hash
}

func (hw hashingWriter) Write(p []byte) (int, error) {
	done := make(chan struct{})
	go func() {
		hw.h.Write(p)
		close(done)
	}()
	n, err := hw.w.Write(p)
	<-done // p is the caller's again once Write returns
	return n, err
}

// exactWriter passes at most left bytes through, so a Stream that writes
// too much fails instead of corrupting the next tensor's offsets.
type exactWriter struct {
	w    io.Writer
	left int64
}

func (e *exactWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > e.left {
		return 0, fmt.Errorf("write exceeds the tensor's size by %d bytes", int64(len(p))-e.left)
	}
	n, err := e.w.Write(p)
	e.left -= int64(n)
	return n, err
}
