package data

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"os"
	"unsafe"
)

// Shard is an opened shard file: numSeqs sequences of seqLen tokens, each
// with a loss mask and the positions where documents start. Slices it
// returns point into the mapped file and are valid until Close.
type Shard struct {
	Path   string
	Header Header

	data      []byte
	unmap     func() error
	tokens    []uint32
	loss      []byte
	docPtr    []uint32
	docStarts []uint32
}

// LossMask is one sequence's loss mask, one bit per token, least
// significant bit first: token j is a training target when bit j is set.
type LossMask []byte

// On reports whether token j of the sequence is a training target.
func (m LossMask) On(j int) bool { return m[j>>3]&(1<<(j&7)) != 0 }

// Count is the number of training targets among the first n tokens.
func (m LossMask) Count(n int) int {
	c := 0
	for _, b := range m[:n>>3] {
		c += bits.OnesCount8(b)
	}
	if r := n & 7; r != 0 {
		c += bits.OnesCount8(m[n>>3] & (1<<r - 1))
	}
	return c
}

// OpenShard maps a shard file and validates it completely: header, size,
// layout, document index and the body checksum.
func OpenShard(path string) (*Shard, error) {
	s, err := OpenShardUnchecked(path)
	if err != nil {
		return nil, err
	}
	if err := s.VerifyChecksum(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// OpenShardUnchecked is OpenShard without the body checksum, for tools
// that want to show a damaged shard; the structure is still validated, so
// every access stays in bounds.
func OpenShardUnchecked(path string) (*Shard, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	s, err := parseShard(data)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	s.Path, s.unmap = path, unmap
	return s, nil
}

// ParseShard validates a shard held in memory, checksum included. The
// shard keeps referring to data.
func ParseShard(data []byte) (*Shard, error) {
	s, err := parseShard(data)
	if err != nil {
		return nil, err
	}
	if err := s.VerifyChecksum(); err != nil {
		return nil, err
	}
	return s, nil
}

func parseShard(data []byte) (*Shard, error) {
	h, err := decodeHeader(data, uint64(len(data)))
	if err != nil {
		return nil, err
	}
	s := &Shard{Header: h, data: data}
	n, L := h.NumSeqs, uint64(h.SeqLen)
	s.tokens = u32s(data[h.TokensOff : h.TokensOff+4*n*L])
	s.loss = data[h.LossOff : h.LossOff+h.LossStride*n]
	s.docPtr = u32s(data[h.DocPtrOff : h.DocPtrOff+4*(n+1)])
	s.docStarts = u32s(data[h.DocStartsOff : h.DocStartsOff+4*h.NumDocStarts])
	if err := s.checkIndex(); err != nil {
		return nil, err
	}
	return s, nil
}

// checkIndex validates the document index, so that Seq never slices out
// of bounds whatever the file holds.
func (s *Shard) checkIndex() error {
	if s.docPtr[0] != 0 || uint64(s.docPtr[len(s.docPtr)-1]) != s.Header.NumDocStarts {
		return fmt.Errorf("document index: pointers run from %d to %d, want 0 to %d", s.docPtr[0], s.docPtr[len(s.docPtr)-1], s.Header.NumDocStarts)
	}
	for i := 0; i+1 < len(s.docPtr); i++ {
		lo, hi := s.docPtr[i], s.docPtr[i+1]
		if hi < lo || uint64(hi) > s.Header.NumDocStarts {
			return fmt.Errorf("document index: sequence %d has pointers %d to %d, outside 0 to %d or decreasing", i, lo, hi, s.Header.NumDocStarts)
		}
		prev := int64(-1)
		for _, st := range s.docStarts[lo:hi] {
			if int64(st) <= prev || st >= s.Header.SeqLen {
				return fmt.Errorf("document index: sequence %d has start %d out of order or past seq_len %d", i, st, s.Header.SeqLen)
			}
			prev = int64(st)
		}
	}
	return nil
}

// VerifyChecksum recomputes the body's CRC-32C and compares it with the
// header's.
func (s *Shard) VerifyChecksum() error {
	got := crc32.Checksum(s.data[HeaderSize:], castagnoli)
	if got != s.Header.BodyCRC {
		return fmt.Errorf("shard %s: body checksum mismatch (header %08x, computed %08x): the file is corrupt", s.name(), s.Header.BodyCRC, got)
	}
	return nil
}

func (s *Shard) name() string {
	if s.Path == "" {
		return "(memory)"
	}
	return s.Path
}

// NumSeqs is the number of sequences in the shard.
func (s *Shard) NumSeqs() int { return int(s.Header.NumSeqs) }

// SeqLen is the number of tokens per sequence.
func (s *Shard) SeqLen() int { return int(s.Header.SeqLen) }

// Seq returns sequence i (0 <= i < NumSeqs): its tokens, loss mask and the
// sorted positions where documents start in it. A sequence whose first
// entry is not 0 begins with the continuation of a document from the
// previous sequence; attention should stay within [start_k, start_k+1).
func (s *Shard) Seq(i int) (tokens []uint32, loss LossMask, docStarts []uint32) {
	L := int(s.Header.SeqLen)
	st := int(s.Header.LossStride)
	return s.tokens[i*L : (i+1)*L], LossMask(s.loss[i*st : (i+1)*st]), s.docStarts[s.docPtr[i]:s.docPtr[i+1]]
}

// Tokens returns all tokens of the shard, sequence after sequence.
func (s *Shard) Tokens() []uint32 { return s.tokens }

// Close unmaps the file; slices returned earlier become invalid.
func (s *Shard) Close() error {
	if s.unmap == nil {
		return nil
	}
	err := s.unmap()
	s.unmap, s.data, s.tokens, s.loss, s.docPtr, s.docStarts = nil, nil, nil, nil, nil, nil
	return err
}

// littleEndian is whether the host can view the file's uint32s in place.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// u32s views little-endian bytes as uint32s without copying when the host
// and alignment allow, and copies otherwise.
func u32s(b []byte) []uint32 {
	n := len(b) / 4
	if n == 0 {
		return []uint32{}
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

// readFileAll is the fallback when mapping is unavailable.
func readFileAll(path string) ([]byte, func() error, error) {
	data, err := os.ReadFile(path)
	return data, func() error { return nil }, err
}
