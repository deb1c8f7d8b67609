package model

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Reading is done in chunks of verifyChunk bytes, verifyDepth of them per
// file in flight, so that the next chunk is read while the last is hashed
// and scanned. maxVerifyFiles bounds the files verified at once: each keeps
// about one core busy hashing, and 16 of them outrun any disk, while the
// cap keeps the buffers under 200 MiB on hosts with many cores.
const (
	verifyChunk    = 4 << 20
	verifyDepth    = 3
	maxVerifyFiles = 16
)

// VerifyWeights checks the safetensors files of the model directory dir
// before they are served: every *.safetensors file is read once (files in
// parallel), its sha256 compared with sums[name] when sums records one, and
// at the same time every floating-point tensor scanned for NaN and
// infinities. sums is typically dllm.json's weights_sha256 and may be nil,
// for the scan alone; a file it names that is missing is an error. The
// error names each damaged file and what to do about it.
func VerifyWeights(ctx context.Context, dir string, sums map[string]string) error {
	names, err := weightFiles(dir)
	if err != nil {
		return fmt.Errorf("model: verifying weights: %w", err)
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(sums)) {
		if !slices.Contains(names, name) {
			errs = append(errs, fmt.Errorf("%s: missing, but dllm.json's weights_sha256 records it: restore it (re-copy the model directory)", name))
		}
	}
	fileErrs := make([]error, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, min(runtime.GOMAXPROCS(0), maxVerifyFiles))
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			fileErrs[i] = verifyFile(ctx, filepath.Join(dir, name), sums[name])
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("model: verifying the weights in %s: %w", dir, err)
	}
	if err := errors.Join(append(errs, fileErrs...)...); err != nil {
		return fmt.Errorf("model: the weights in %s failed verification:\n%w", dir, err)
	}
	return nil
}

// weightFiles lists the names of the safetensors files in dir, sorted.
func weightFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// verifyFile hashes and scans one file; want is its recorded hex sha256,
// "" for none.
func verifyFile(ctx context.Context, path, want string) error {
	name := filepath.Base(path)
	f, err := os.Open(path) // follows links: HF snapshots link into blobs
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", name)
	}
	tensors, _, herr := readHeader(f, st.Size(), path)
	if herr != nil {
		herr = fmt.Errorf("%s: the header is damaged or this is not a safetensors file (re-copy it): %w", name, herr)
		if want == "" {
			return herr
		}
		// Hashed all the same, with nothing to scan, so that a recorded
		// file says whether it changed.
	}
	sc := newScanner(tensors)
	got, err := hashAndScan(ctx, f, st.Size(), sc, want != "")
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	errs := []error{herr, sc.err(name)} // Join drops the nils
	if got != want {
		errs = append(errs, fmt.Errorf("%s: sha256 is %s but dllm.json records %s: the file changed after it was written "+
			"(a damaged copy or disk?); re-copy it, or if you replaced it on purpose remove its entry from dllm.json's weights_sha256",
			name, got, want))
	}
	return errors.Join(errs...)
}

// hashAndScan streams the file f of size bytes through the scanner and,
// when hashing, through sha256 as well, returning the hex sum ("" when not
// hashing).
func hashAndScan(ctx context.Context, f io.Reader, size int64, sc *scanner, hashing bool) (string, error) {
	if !hashing {
		return "", streamFile(ctx, f, size, sc.cut, sc.scan)
	}
	h := sha256.New()
	err := streamFile(ctx, f, size, sc.cut, func(off int64, b []byte) {
		// The hash and the scan read the same buffer side by side, so a
		// chunk costs the slower of the two.
		done := make(chan struct{})
		go func() {
			h.Write(b)
			close(done)
		}()
		sc.scan(off, b)
		<-done
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// streamFile reads f (size bytes) from the start in chunks and hands each
// to use, in order, while the next ones are read. A chunk ends where cut
// moves its end, so that no element is split between two chunks.
func streamFile(ctx context.Context, f io.Reader, size int64, cut func(int64) int64, use func(off int64, b []byte)) error {
	type chunk struct {
		off int64
		b   []byte
		err error
	}
	free := make(chan []byte, verifyDepth)
	for range verifyDepth {
		free <- make([]byte, verifyChunk)
	}
	full := make(chan chunk, verifyDepth)
	stop := make(chan struct{})
	go func() {
		defer close(full)
		for off := int64(0); off < size; {
			var buf []byte
			select {
			case <-stop:
				return
			case buf = <-free:
			}
			end := cut(min(off+verifyChunk, size))
			n, err := io.ReadFull(f, buf[:end-off])
			if err == nil {
				err = ctx.Err()
			}
			full <- chunk{off, buf[:n], err}
			if err != nil {
				return
			}
			off = end
		}
	}()
	// Returning early stops the reader and waits for it, so it never reads
	// after the caller has closed f.
	defer func() {
		close(stop)
		for range full {
		}
	}()
	for c := range full {
		if errors.Is(c.err, io.ErrUnexpectedEOF) || errors.Is(c.err, io.EOF) {
			return fmt.Errorf("the file ended at byte %d, before the %d bytes its size said: it is being rewritten or truncated", c.off+int64(len(c.b)), size)
		}
		if c.err != nil {
			return c.err
		}
		use(c.off, c.b)
		free <- c.b[:cap(c.b)]
	}
	return nil
}

// scanner counts the non-finite elements of a file's floating-point
// tensors, fed the file's bytes in order.
type scanner struct {
	tensors []TensorInfo // floating, non-empty, by offset
	found   []finding    // per tensor
	next    int          // the first tensor not wholly before the last chunk
}

// finding is what the scan found in one tensor.
type finding struct {
	count int64
	first int64 // element index of the first non-finite value
	value float64
}

func newScanner(all []TensorInfo) *scanner {
	var ts []TensorInfo
	for _, t := range all {
		if _, ok := nonFiniteMasks[t.DType]; ok && t.Size > 0 {
			ts = append(ts, t)
		}
	}
	return &scanner{tensors: ts, found: make([]finding, len(ts))}
}

// cut moves a chunk's end back to an element boundary of the tensor it
// falls in, so that a scan never sees part of an element.
func (s *scanner) cut(end int64) int64 {
	i := sort.Search(len(s.tensors), func(i int) bool { return s.tensors[i].Offset+s.tensors[i].Size > end })
	if i == len(s.tensors) || s.tensors[i].Offset >= end {
		return end
	}
	t := s.tensors[i]
	return end - (end-t.Offset)%int64(t.DType.Size())
}

// scan checks the tensor data in b, the file's bytes from off on.
func (s *scanner) scan(off int64, b []byte) {
	end := off + int64(len(b))
	for s.next < len(s.tensors) && s.tensors[s.next].Offset+s.tensors[s.next].Size <= off {
		s.next++
	}
	for i := s.next; i < len(s.tensors) && s.tensors[i].Offset < end; i++ {
		t := s.tensors[i]
		lo, hi := max(t.Offset, off), min(t.Offset+t.Size, end)
		n, first := countNonFinite(b[lo-off:hi-off], t.DType)
		if n == 0 {
			continue
		}
		f := &s.found[i]
		if f.count == 0 {
			size := int64(t.DType.Size())
			f.first = (lo-t.Offset)/size + int64(first)
			f.value = loadElement(b[lo-off+int64(first)*size:], t.DType)
		}
		f.count += int64(n)
	}
}

// err reports the first tensor with non-finite values and how many others
// have some.
func (s *scanner) err(file string) error {
	var bad []int
	for i, f := range s.found {
		if f.count > 0 {
			bad = append(bad, i)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	f := s.found[bad[0]]
	msg := fmt.Sprintf("%s: tensor %s has %s (first at element %d: %v)",
		file, s.tensors[bad[0]].Name, plural(f.count, "non-finite value", "non-finite values"), f.first, f.value)
	if more := int64(len(bad) - 1); more > 0 {
		msg += fmt.Sprintf(", and %s", plural(more, "more tensor has some", "more tensors have some"))
	}
	return errors.New(msg + ": the weights are broken (a diverged training run, or damage); re-export or re-convert them")
}

// plural is "1 one" or "n many".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// nonFiniteMask finds the non-finite elements of one dtype in a 64-bit
// little-endian word: exp is the exponent field of every element in the
// word, low every element's bits below its sign bit, high its sign bit.
type nonFiniteMask struct{ exp, low, high uint64 }

var nonFiniteMasks = map[DType]nonFiniteMask{
	BF16: {0x7F80_7F80_7F80_7F80, 0x7FFF_7FFF_7FFF_7FFF, 0x8000_8000_8000_8000},
	F16:  {0x7C00_7C00_7C00_7C00, 0x7FFF_7FFF_7FFF_7FFF, 0x8000_8000_8000_8000},
	F32:  {0x7F80_0000_7F80_0000, 0x7FFF_FFFF_7FFF_FFFF, 0x8000_0000_8000_0000},
	F64:  {0x7FF0_0000_0000_0000, 0x7FFF_FFFF_FFFF_FFFF, 0x8000_0000_0000_0000},
}

// flags sets the sign bit of every element of x whose exponent bits are all
// set (NaN or infinity) and clears everything else. (x&exp)^exp is zero in
// exactly those elements and below the sign bit in all; adding low carries
// into the sign bit unless the element is zero, and never further.
func (m nonFiniteMask) flags(x uint64) uint64 {
	return ^(((x & m.exp) ^ m.exp) + m.low) & m.high
}

// countNonFinite counts the non-finite elements of dtype dt in b, which
// holds whole elements, and returns the index of the first (-1 if none).
// It works a 64-bit word at a time, 4 bf16 elements per step.
func countNonFinite(b []byte, dt DType) (n, first int) {
	m := nonFiniteMasks[dt]
	size := dt.Size()
	first = -1
	note := func(at int, fl uint64) {
		n += bits.OnesCount64(fl)
		if first < 0 {
			first = at/size + bits.TrailingZeros64(fl)/(8*size)
		}
	}
	i := 0
	for ; i+32 <= len(b); i += 32 {
		// Four words at once: the common case, all finite, costs one
		// branch per 32 bytes.
		f0 := m.flags(binary.LittleEndian.Uint64(b[i:]))
		f1 := m.flags(binary.LittleEndian.Uint64(b[i+8:]))
		f2 := m.flags(binary.LittleEndian.Uint64(b[i+16:]))
		f3 := m.flags(binary.LittleEndian.Uint64(b[i+24:]))
		if f0|f1|f2|f3 == 0 {
			continue
		}
		for k, fl := range [4]uint64{f0, f1, f2, f3} {
			if fl != 0 {
				note(i+8*k, fl)
			}
		}
	}
	for ; i < len(b); i += 8 {
		// Zero padding is finite, so a short tail counts only its own.
		var w [8]byte
		copy(w[:], b[i:])
		if fl := m.flags(binary.LittleEndian.Uint64(w[:])); fl != 0 {
			note(i, fl)
		}
	}
	return n, first
}

// loadElement reads one element of a floating dtype as a float64.
func loadElement(b []byte, dt DType) float64 {
	switch dt {
	case BF16:
		return float64(BF16ToFloat32(binary.LittleEndian.Uint16(b)))
	case F16:
		return float64(F16ToFloat32(binary.LittleEndian.Uint16(b)))
	case F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}
