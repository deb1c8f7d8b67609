package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testSeq is one sequence to write in a shard test.
type testSeq struct {
	tokens []uint32
	loss   []bool
	starts []uint32
}

// writeTestShard writes seqs to a shard at path and returns its bytes.
func writeTestShard(t testing.TB, path string, seqLen int, seqs []testSeq) []byte {
	t.Helper()
	w, err := createShard(path, seqLen, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seqs {
		mask := make([]byte, lossStride(uint64(seqLen)))
		for j, on := range s.loss {
			if on {
				mask[j>>3] |= 1 << (j & 7)
			}
		}
		if err := w.add(s.tokens, mask, s.starts); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.commit(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func sampleSeqs(seqLen, n int) []testSeq {
	var seqs []testSeq
	for i := 0; i < n; i++ {
		s := testSeq{}
		for j := 0; j < seqLen; j++ {
			s.tokens = append(s.tokens, uint32(i*seqLen+j))
			s.loss = append(s.loss, (i+j)%3 != 0)
		}
		if i%2 == 0 {
			s.starts = []uint32{0, uint32(seqLen / 2)}
		} else {
			s.starts = []uint32{uint32(seqLen - 1)}
		}
		seqs = append(seqs, s)
	}
	return seqs
}

func TestDataShardRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name      string
		seqLen, n int
	}{
		{"aligned", 16, 3},
		{"odd length", 13, 5}, // sections need padding
		{"one sequence", 7, 1},
		{"empty", 8, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.bin")
			want := sampleSeqs(tc.seqLen, tc.n)
			data := writeTestShard(t, path, tc.seqLen, want)
			if len(data)%8 != 0 {
				t.Errorf("file size %d is not a multiple of 8", len(data))
			}
			if _, err := os.Stat(path + tmpSuffix); !os.IsNotExist(err) {
				t.Errorf("temporary file left behind: %v", err)
			}
			s, err := OpenShard(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			h := s.Header
			if s.NumSeqs() != tc.n || s.SeqLen() != tc.seqLen || h.VocabSize != 1000 {
				t.Fatalf("header: %+v", h)
			}
			for _, off := range []uint64{h.TokensOff, h.LossOff, h.DocPtrOff, h.DocStartsOff, h.LossStride} {
				if off%8 != 0 {
					t.Errorf("section offset %d not 8-byte aligned", off)
				}
			}
			for i, w := range want {
				tok, loss, starts := s.Seq(i)
				for j := range w.tokens {
					if tok[j] != w.tokens[j] || loss.On(j) != w.loss[j] {
						t.Fatalf("seq %d token %d: got %d/%v, want %d/%v", i, j, tok[j], loss.On(j), w.tokens[j], w.loss[j])
					}
				}
				if len(starts) != len(w.starts) {
					t.Fatalf("seq %d starts %v, want %v", i, starts, w.starts)
				}
				for k := range starts {
					if starts[k] != w.starts[k] {
						t.Fatalf("seq %d starts %v, want %v", i, starts, w.starts)
					}
				}
			}
		})
	}
}

func TestDataShardDamageDetected(t *testing.T) {
	dir := t.TempDir()
	good := writeTestShard(t, filepath.Join(dir, "good.bin"), 16, sampleSeqs(16, 4))
	h, err := decodeHeader(good, uint64(len(good)))
	if err != nil {
		t.Fatal(err)
	}
	flip := func(off uint64) []byte {
		b := append([]byte(nil), good...)
		b[off] ^= 0x40
		return b
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"token byte flipped", flip(h.TokensOff + 5), "body checksum mismatch"},
		{"loss byte flipped", flip(h.LossOff + 1), "body checksum mismatch"},
		{"doc start flipped", flip(h.DocStartsOff), "document index"},
		{"header count flipped", flip(24), "header checksum mismatch"},
		{"magic", flip(0), "bad magic"},
		{"truncated", good[:len(good)-8], "truncated"},
		{"truncated header", good[:40], "shorter than"},
		{"trailing data", append(append([]byte(nil), good...), 0, 0, 0, 0, 0, 0, 0, 0), "trailing data"},
		{"empty", nil, "shorter than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
			writeFile(t, path, c.data)
			s, err := OpenShard(path)
			if err == nil {
				s.Close()
				t.Fatal("damaged shard opened without error")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q: want it to mention %q and the path", err, c.want)
			}
		})
	}
	// Unchecked opening shows a body-damaged shard, and reports the
	// damage on demand.
	path := filepath.Join(dir, "token_byte_flipped")
	s, err := OpenShardUnchecked(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.VerifyChecksum(); err == nil {
		t.Error("VerifyChecksum passed a damaged shard")
	}
}

// FuzzShardReader checks that no input makes the reader panic or hand out
// slices it cannot index.
func FuzzShardReader(f *testing.F) {
	dir := f.TempDir()
	good := writeTestShard(f, filepath.Join(dir, "a.bin"), 8, sampleSeqs(8, 3))
	f.Add(good)
	f.Add(writeTestShard(f, filepath.Join(dir, "b.bin"), 5, sampleSeqs(5, 2)))
	f.Add(good[:HeaderSize])
	f.Add([]byte(ShardMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Checksums make nearly every mutation fail early; the structure
		// checks must hold on their own, so parse without the body check
		// and also with a recomputed header checksum.
		for _, b := range [][]byte{data, fixHeaderCRC(data)} {
			s, err := parseShard(b)
			if err != nil {
				continue
			}
			s.VerifyChecksum()
			for i := 0; i < s.NumSeqs(); i++ {
				tok, loss, starts := s.Seq(i)
				if len(tok) != s.SeqLen() {
					t.Fatalf("seq %d has %d tokens", i, len(tok))
				}
				loss.Count(s.SeqLen())
				for _, st := range starts {
					_ = tok[st]
				}
			}
		}
	})
}

// fixHeaderCRC rewrites the header checksum so that fuzzed headers reach
// the layout checks.
func fixHeaderCRC(data []byte) []byte {
	if len(data) < HeaderSize {
		return data
	}
	b := append([]byte(nil), data...)
	h := b[:HeaderSize]
	sum := crc32Checksum(h[:124])
	h[124], h[125], h[126], h[127] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
	return b
}
