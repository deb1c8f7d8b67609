package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Shard format constants; docs/data-format.md is the specification.
const (
	// ShardMagic opens every shard file.
	ShardMagic = "DLLMSHRD"
	// ShardVersion is the layout version written and the only one read.
	ShardVersion = 1
	// HeaderSize is the fixed size of the shard header; the body follows.
	HeaderSize = 128
	// FlagLossMask says the shard carries a loss-mask section. Every shard
	// written so far has one; the bit exists so that a later mask-less
	// variant is not mistaken for this one.
	FlagLossMask = 1 << 0

	knownFlags = FlagLossMask
	// maxSeqLen bounds seq_len so that sizes computed from a header cannot
	// overflow on any input.
	maxSeqLen = 1 << 24
	// maxShardTokens bounds a shard's token count (2^31), which keeps the
	// uint32 document index valid and a shard below about 9 GB.
	maxShardTokens = 1 << 31
)

// castagnoli is CRC-32C, hardware-accelerated on amd64 and arm64.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is a shard's fixed-size header. Offsets are from the start of the
// file and always follow the canonical layout computed by layoutFor; they
// are stored so that readers in other languages need no layout code.
type Header struct {
	Version      uint32
	Flags        uint32
	SeqLen       uint32
	NumSeqs      uint64
	NumDocStarts uint64
	TokensOff    uint64
	LossOff      uint64
	LossStride   uint64 // bytes of loss mask per sequence, a multiple of 8
	DocPtrOff    uint64
	DocStartsOff uint64
	FileSize     uint64
	BodyCRC      uint32 // CRC-32C of bytes [HeaderSize, FileSize)
	VocabSize    uint32 // informational: the tokenizer's vocabulary size
}

// align8 rounds n up to a multiple of 8.
func align8(n uint64) uint64 { return (n + 7) &^ 7 }

// lossStride is the loss-mask bytes per sequence: one bit per token,
// rounded up to 8 bytes so every sequence's mask starts aligned.
func lossStride(seqLen uint64) uint64 { return align8((seqLen + 7) / 8) }

// layoutFor fills the offsets and file size of the canonical layout for a
// shard of numSeqs sequences of seqLen tokens and numDocStarts document
// starts.
func layoutFor(seqLen, numSeqs, numDocStarts uint64) Header {
	h := Header{Version: ShardVersion, Flags: FlagLossMask, SeqLen: uint32(seqLen), NumSeqs: numSeqs, NumDocStarts: numDocStarts}
	h.TokensOff = HeaderSize
	h.LossStride = lossStride(seqLen)
	h.LossOff = align8(h.TokensOff + 4*seqLen*numSeqs)
	h.DocPtrOff = h.LossOff + h.LossStride*numSeqs
	h.DocStartsOff = align8(h.DocPtrOff + 4*(numSeqs+1))
	h.FileSize = align8(h.DocStartsOff + 4*numDocStarts)
	return h
}

// encode writes the header, with its own CRC-32C in the last 4 bytes.
func (h *Header) encode() []byte {
	b := make([]byte, HeaderSize)
	le := binary.LittleEndian
	copy(b, ShardMagic)
	le.PutUint32(b[8:], h.Version)
	le.PutUint32(b[12:], h.Flags)
	le.PutUint32(b[16:], h.SeqLen)
	le.PutUint32(b[20:], HeaderSize)
	le.PutUint64(b[24:], h.NumSeqs)
	le.PutUint64(b[32:], h.NumDocStarts)
	le.PutUint64(b[40:], h.TokensOff)
	le.PutUint64(b[48:], h.LossOff)
	le.PutUint64(b[56:], h.LossStride)
	le.PutUint64(b[64:], h.DocPtrOff)
	le.PutUint64(b[72:], h.DocStartsOff)
	le.PutUint64(b[80:], h.FileSize)
	le.PutUint32(b[88:], h.BodyCRC)
	le.PutUint32(b[92:], h.VocabSize)
	le.PutUint32(b[124:], crc32.Checksum(b[:124], castagnoli))
	return b
}

// errNotShard is returned for files that do not start with ShardMagic.
var errNotShard = errors.New("not a dllm shard (bad magic)")

// decodeHeader parses and validates a header against the size of the file
// it came from: every field must describe the canonical layout exactly.
func decodeHeader(b []byte, size uint64) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("file is %d bytes, shorter than the %d-byte header", len(b), HeaderSize)
	}
	if string(b[:8]) != ShardMagic {
		return h, errNotShard
	}
	le := binary.LittleEndian
	if got, want := le.Uint32(b[124:]), crc32.Checksum(b[:124], castagnoli); got != want {
		return h, fmt.Errorf("header checksum mismatch (stored %08x, computed %08x): the header is corrupt", got, want)
	}
	h.Version = le.Uint32(b[8:])
	if h.Version != ShardVersion {
		return h, fmt.Errorf("shard format version %d; this dllm reads version %d", h.Version, ShardVersion)
	}
	h.Flags = le.Uint32(b[12:])
	if h.Flags&^knownFlags != 0 || h.Flags&FlagLossMask == 0 {
		return h, fmt.Errorf("unsupported shard flags %#x", h.Flags)
	}
	h.SeqLen = le.Uint32(b[16:])
	if hs := le.Uint32(b[20:]); hs != HeaderSize {
		return h, fmt.Errorf("header size %d, want %d", hs, HeaderSize)
	}
	h.NumSeqs = le.Uint64(b[24:])
	h.NumDocStarts = le.Uint64(b[32:])
	h.TokensOff = le.Uint64(b[40:])
	h.LossOff = le.Uint64(b[48:])
	h.LossStride = le.Uint64(b[56:])
	h.DocPtrOff = le.Uint64(b[64:])
	h.DocStartsOff = le.Uint64(b[72:])
	h.FileSize = le.Uint64(b[80:])
	h.BodyCRC = le.Uint32(b[88:])
	h.VocabSize = le.Uint32(b[92:])
	for i := 96; i < 124; i++ {
		if b[i] != 0 {
			return h, fmt.Errorf("reserved header byte %d is %#x, want 0", i, b[i])
		}
	}
	if h.SeqLen == 0 || h.SeqLen > maxSeqLen {
		return h, fmt.Errorf("seq_len %d out of range [1, %d]", h.SeqLen, maxSeqLen)
	}
	// Checked before multiplying, so that no header can overflow the
	// layout arithmetic.
	if h.NumSeqs > maxShardTokens/uint64(h.SeqLen) {
		return h, fmt.Errorf("%d sequences of %d tokens exceed the shard limit", h.NumSeqs, h.SeqLen)
	}
	if h.NumDocStarts > h.NumSeqs*uint64(h.SeqLen) {
		return h, fmt.Errorf("%d document starts for %d tokens", h.NumDocStarts, h.NumSeqs*uint64(h.SeqLen))
	}
	want := layoutFor(uint64(h.SeqLen), h.NumSeqs, h.NumDocStarts)
	want.BodyCRC, want.VocabSize = h.BodyCRC, h.VocabSize
	if h != want {
		return h, fmt.Errorf("header offsets do not match the layout for %d sequences of %d tokens", h.NumSeqs, h.SeqLen)
	}
	if size != h.FileSize {
		if size < h.FileSize {
			return h, fmt.Errorf("file is %d bytes but the header says %d: the shard is truncated", size, h.FileSize)
		}
		return h, fmt.Errorf("file is %d bytes but the header says %d: trailing data", size, h.FileSize)
	}
	return h, nil
}

// crc32Checksum is CRC-32C of b.
func crc32Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
