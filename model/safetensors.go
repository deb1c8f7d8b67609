package model

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"unicode/utf8"
)

// maxHeaderSize bounds the JSON header, as the reference safetensors reader
// does, so a corrupt length cannot make us allocate gigabytes.
const maxHeaderSize = 100_000_000

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	// Shape is in PyTorch order; [] is a scalar.
	Shape []int64
	// Offset is the absolute byte offset of the data in File, and Size its
	// length, so a loader may also read it with pread or O_DIRECT.
	Offset int64
	Size   int64
	// File is the path of the file holding the tensor (its shard).
	File string
}

// SafetensorsFile is an open, validated safetensors file. Its tensor data is
// memory-mapped, not read: Bytes hands out views of the page cache, so a
// 5 GB checkpoint can be copied to the GPU without a second 5 GB host copy,
// and only the pages actually touched are ever read from disk.
//
// It is safe for concurrent use, except that Close must not race with other
// calls. The file must not be modified while it is open: a truncated mapping
// faults on access.
type SafetensorsFile struct {
	path    string
	data    []byte // whole file
	unmap   func([]byte) error
	tensors []TensorInfo // by offset
	byName  map[string]int
	meta    map[string]string
}

// OpenSafetensors opens and validates path. The header is read and checked
// in full (dtypes, shapes, offsets in range, sizes, no overlaps) before the
// file is mapped, so a corrupt file never yields a tensor.
func OpenSafetensors(path string) (*SafetensorsFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s: not a regular file", path)
	}
	tensors, meta, err := readHeader(f, st.Size(), path)
	if err != nil {
		return nil, err
	}
	data, unmap, err := mapFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return newSafetensorsFile(path, data, unmap, tensors, meta), nil
}

func newSafetensorsFile(path string, data []byte, unmap func([]byte) error, tensors []TensorInfo, meta map[string]string) *SafetensorsFile {
	sf := &SafetensorsFile{path: path, data: data, unmap: unmap, tensors: tensors,
		byName: make(map[string]int, len(tensors)), meta: meta}
	for i, t := range tensors {
		sf.byName[t.Name] = i
	}
	return sf
}

// Path is the file's path as given to OpenSafetensors.
func (f *SafetensorsFile) Path() string { return f.path }

// Tensors lists the tensors in file order (by offset), which is the order to
// read them in for sequential I/O. The slice is shared: do not modify it.
func (f *SafetensorsFile) Tensors() []TensorInfo { return f.tensors }

// Tensor looks a tensor up by name.
func (f *SafetensorsFile) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}

// Shapes maps every tensor name to its shape, the form CheckTensors takes.
func (f *SafetensorsFile) Shapes() map[string][]int64 {
	m := make(map[string][]int64, len(f.tensors))
	for _, t := range f.tensors {
		m[t.Name] = t.Shape
	}
	return m
}

// Metadata is the header's __metadata__ map (nil if absent).
func (f *SafetensorsFile) Metadata() map[string]string { return f.meta }

// Bytes returns the raw little-endian data of a tensor as a read-only view
// of the mapping (zero copy). Writing to it faults; it is invalid after
// Close. Copy it if it must outlive the file.
func (f *SafetensorsFile) Bytes(name string) ([]byte, error) {
	i, ok := f.byName[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: %s: no tensor %q", f.path, name)
	}
	if f.data == nil {
		return nil, fmt.Errorf("safetensors: %s: file is closed", f.path)
	}
	t := f.tensors[i]
	end := t.Offset + t.Size
	return f.data[t.Offset:end:end], nil
}

// Close unmaps the file. Slices from Bytes must not be used afterwards.
func (f *SafetensorsFile) Close() error {
	if f.data == nil {
		return nil
	}
	data := f.data
	f.data = nil
	if f.unmap == nil {
		return nil
	}
	if err := f.unmap(data); err != nil {
		return fmt.Errorf("safetensors: %s: %w", f.path, err)
	}
	return nil
}

// readHeader reads and validates the header of a safetensors file of the
// given size. It never trusts the length prefix before checking it.
func readHeader(r io.ReaderAt, size int64, path string) ([]TensorInfo, map[string]string, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: %s: "+format, append([]any{path}, args...)...)
	}
	if size < 8 {
		return nil, nil, fail("file too short (%d bytes) for the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, nil, fail("reading header length: %v", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeaderSize {
		return nil, nil, fail("header length %d exceeds the %d-byte limit", n, maxHeaderSize)
	}
	if n > uint64(size-8) {
		return nil, nil, fail("header length %d exceeds the file (%d bytes): truncated file?", n, size)
	}
	if n < 2 {
		return nil, nil, fail("header length %d is too small for a JSON object", n)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, nil, fail("reading header: %v", err)
	}
	tensors, meta, err := parseHeader(hdr, 8+int64(n), size-8-int64(n))
	if err != nil {
		return nil, nil, fail("%v", err)
	}
	for i := range tensors {
		tensors[i].File = path
	}
	return tensors, meta, nil
}

// headerEntry is one tensor in the header. Numbers are kept raw so that
// negatives, fractions and strings are rejected rather than coerced.
type headerEntry struct {
	DType       *string           `json:"dtype"`
	Shape       []json.RawMessage `json:"shape"`
	DataOffsets []json.RawMessage `json:"data_offsets"`
}

// parseHeader validates the JSON header of a file whose data region starts
// at dataStart (absolute) and is dataLen bytes long.
func parseHeader(hdr []byte, dataStart, dataLen int64) ([]TensorInfo, map[string]string, error) {
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, nil, errors.New("header does not start with '{'")
	}
	if !utf8.Valid(hdr) {
		return nil, nil, errors.New("header is not valid UTF-8")
	}
	entries, err := decodeObject(hdr)
	if err != nil {
		return nil, nil, fmt.Errorf("bad header JSON: %v", err)
	}
	var meta map[string]string
	tensors := make([]TensorInfo, 0, len(entries))
	for _, e := range entries {
		if e.key == "__metadata__" {
			if err := json.Unmarshal(e.val, &meta); err != nil {
				return nil, nil, fmt.Errorf("__metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		t, err := parseEntry(e.key, e.val, dataLen)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %v", e.key, err)
		}
		t.Offset += dataStart
		tensors = append(tensors, t)
	}
	slices.SortFunc(tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Offset, b.Offset), cmp.Compare(a.Size, b.Size))
	})
	// Sorted by begin, ranges are disjoint iff each begins at or after the
	// previous end. Empty tensors occupy nothing and may sit anywhere.
	var prev *TensorInfo
	for i := range tensors {
		t := &tensors[i]
		if t.Size == 0 {
			continue
		}
		if prev != nil && t.Offset < prev.Offset+prev.Size {
			return nil, nil, fmt.Errorf("tensors %q and %q overlap", prev.Name, t.Name)
		}
		prev = t
	}
	return tensors, meta, nil
}

func parseEntry(name string, raw json.RawMessage, dataLen int64) (TensorInfo, error) {
	var e headerEntry
	if name == "" {
		return TensorInfo{}, errors.New("empty tensor name")
	}
	if len(raw) == 0 || raw[0] != '{' {
		return TensorInfo{}, errors.New("entry is not an object")
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return TensorInfo{}, err
	}
	if e.DType == nil || e.Shape == nil || e.DataOffsets == nil {
		return TensorInfo{}, errors.New("entry needs dtype, shape and data_offsets")
	}
	dt, err := ParseDType(*e.DType)
	if err != nil {
		return TensorInfo{}, err
	}
	t := TensorInfo{Name: name, DType: dt, Shape: make([]int64, len(e.Shape))}
	numel := uint64(1)
	for i, d := range e.Shape {
		v, err := parseUint(d)
		if err != nil {
			return TensorInfo{}, fmt.Errorf("shape[%d]: %v", i, err)
		}
		t.Shape[i] = int64(v)
		hi, lo := bits.Mul64(numel, v)
		if hi != 0 || lo > math.MaxInt64 {
			return TensorInfo{}, fmt.Errorf("shape %v... overflows", t.Shape[:i+1])
		}
		numel = lo
	}
	hi, nbytes := bits.Mul64(numel, uint64(dt.Size()))
	if hi != 0 || nbytes > math.MaxInt64 {
		return TensorInfo{}, fmt.Errorf("shape %v overflows", t.Shape)
	}
	if len(e.DataOffsets) != 2 {
		return TensorInfo{}, fmt.Errorf("data_offsets has %d values, want 2", len(e.DataOffsets))
	}
	begin, err := parseUint(e.DataOffsets[0])
	if err != nil {
		return TensorInfo{}, fmt.Errorf("data_offsets[0]: %v", err)
	}
	end, err := parseUint(e.DataOffsets[1])
	if err != nil {
		return TensorInfo{}, fmt.Errorf("data_offsets[1]: %v", err)
	}
	switch {
	case begin > end:
		return TensorInfo{}, fmt.Errorf("data_offsets [%d, %d] reversed", begin, end)
	case end > uint64(dataLen):
		return TensorInfo{}, fmt.Errorf("data_offsets [%d, %d] outside the %d-byte data region: truncated file?", begin, end, dataLen)
	case end-begin != nbytes:
		return TensorInfo{}, fmt.Errorf("data_offsets [%d, %d] hold %d bytes, but %s %v needs %d",
			begin, end, end-begin, dt, t.Shape, nbytes)
	}
	t.Offset, t.Size = int64(begin), int64(nbytes)
	return t, nil
}

func parseUint(raw json.RawMessage) (uint64, error) {
	v, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not a non-negative integer", raw)
	}
	return v, nil
}

type jsonEntry struct {
	key string
	val json.RawMessage
}

// decodeObject splits a JSON object into its entries, in order, rejecting
// duplicate keys (encoding/json would silently keep the last, which could
// hide a tensor) and anything after the closing brace but whitespace.
func decodeObject(b []byte) ([]jsonEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	seen := map[string]bool{}
	var out []jsonEntry
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		out = append(out, jsonEntry{key, val})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the header object")
	}
	return out, nil
}
