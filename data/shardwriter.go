package data

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// tmpSuffix marks a shard or manifest being written; such a file is never
// read as valid and is removed by the next run. The suffix is this tool's
// own, so that the cleanup never touches a user's *.tmp files.
const tmpSuffix = ".dllm-tmp"

// shardWriter streams one shard to a temporary file: tokens go straight to
// disk, the loss mask and document index (1/32 of the size and less) are
// kept in memory and appended at commit, then the header is written.
type shardWriter struct {
	path   string // final name
	seqLen int
	vocab  uint32
	f      *os.File
	bw     *bufio.Writer
	crc    uint32
	n      uint64
	buf    []byte

	loss      []byte
	docPtr    []uint32
	docStarts []uint32
}

// createShard starts writing the shard that will be renamed to path.
func createShard(path string, seqLen int, vocab uint32) (*shardWriter, error) {
	f, err := os.OpenFile(path+tmpSuffix, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	w := &shardWriter{path: path, seqLen: seqLen, vocab: vocab, f: f, bw: bufio.NewWriterSize(f, 1<<20), docPtr: []uint32{0}}
	// The header is written last, when its counts and checksum are known;
	// until then the file starts with zeros, which never read as a shard.
	if _, err := w.bw.Write(make([]byte, HeaderSize)); err != nil {
		w.abort()
		return nil, err
	}
	return w, nil
}

// add appends one sequence: seqLen tokens, its loss mask (lossStride
// bytes) and its sorted document starts.
func (w *shardWriter) add(tokens []uint32, loss []byte, starts []uint32) error {
	if len(tokens) != w.seqLen || uint64(len(loss)) != lossStride(uint64(w.seqLen)) {
		return fmt.Errorf("internal: sequence of %d tokens and %d mask bytes for seq_len %d", len(tokens), len(loss), w.seqLen)
	}
	if (w.n+1)*uint64(w.seqLen) > maxShardTokens {
		return fmt.Errorf("shard would exceed %d tokens; lower shard_tokens", uint64(maxShardTokens))
	}
	w.buf = w.buf[:0]
	for _, t := range tokens {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, t)
	}
	if err := w.write(w.buf); err != nil {
		return err
	}
	w.loss = append(w.loss, loss...)
	w.docStarts = append(w.docStarts, starts...)
	w.docPtr = append(w.docPtr, uint32(len(w.docStarts)))
	w.n++
	return nil
}

// write sends body bytes to the file and the checksum.
func (w *shardWriter) write(b []byte) error {
	w.crc = crc32.Update(w.crc, castagnoli, b)
	_, err := w.bw.Write(b)
	return err
}

// writtenShard describes a committed shard.
type writtenShard struct {
	numSeqs, numDocStarts uint64
	bytes                 uint64
	crc                   uint32
}

// commit writes the remaining sections and the header, syncs the file,
// renames it to its final name and syncs the directory, so that the shard
// exists under its name only once it is complete on disk.
func (w *shardWriter) commit() (writtenShard, error) {
	h := layoutFor(uint64(w.seqLen), w.n, uint64(len(w.docStarts)))
	pos := h.TokensOff + 4*uint64(w.seqLen)*w.n
	err := w.pad(&pos, h.LossOff)
	if err == nil {
		err = w.write(w.loss)
		pos += uint64(len(w.loss))
	}
	if err == nil {
		err = w.writeU32s(w.docPtr, &pos)
	}
	if err == nil {
		err = w.pad(&pos, h.DocStartsOff)
	}
	if err == nil {
		err = w.writeU32s(w.docStarts, &pos)
	}
	if err == nil {
		err = w.pad(&pos, h.FileSize)
	}
	if err == nil {
		err = w.bw.Flush()
	}
	h.BodyCRC, h.VocabSize = w.crc, w.vocab
	if err == nil {
		_, err = w.f.WriteAt(h.encode(), 0)
	}
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err == nil {
		err = os.Rename(w.path+tmpSuffix, w.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(w.path))
	}
	if err != nil {
		w.abort()
		return writtenShard{}, fmt.Errorf("write shard %s: %w", w.path, err)
	}
	return writtenShard{numSeqs: w.n, numDocStarts: uint64(len(w.docStarts)), bytes: h.FileSize, crc: h.BodyCRC}, nil
}

func (w *shardWriter) writeU32s(v []uint32, pos *uint64) error {
	w.buf = w.buf[:0]
	for _, x := range v {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, x)
	}
	*pos += uint64(len(w.buf))
	return w.write(w.buf)
}

// pad writes zeros from *pos up to off.
func (w *shardWriter) pad(pos *uint64, off uint64) error {
	if off < *pos {
		return errors.New("internal: shard layout went backwards")
	}
	err := w.write(make([]byte, off-*pos))
	*pos = off
	return err
}

// abort drops the temporary file; the final name is never touched.
func (w *shardWriter) abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	os.Remove(w.path + tmpSuffix)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
