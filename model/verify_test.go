package model

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	shard1 = "model-00001-of-00002.safetensors"
	shard2 = "model-00002-of-00002.safetensors"
)

// floatBytes encodes n pseudo-random finite values of a floating dtype.
func floatBytes(dt DType, n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n*dt.Size())
	for i := range n {
		storeElement(b[i*dt.Size():], dt, rng.NormFloat64())
	}
	return b
}

// storeElement writes one element of a floating dtype.
func storeElement(b []byte, dt DType, v float64) {
	switch dt {
	case BF16:
		binary.LittleEndian.PutUint16(b, Float32ToBF16(float32(v)))
	case F16:
		binary.LittleEndian.PutUint16(b, Float32ToF16(float32(v)))
	case F32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case F64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	}
}

// repeated is n copies of an element's bytes: integers whose bits look like
// a float NaN or infinity, which the scan must leave alone.
func repeated(n int, elem ...byte) []byte {
	var b []byte
	for range n {
		b = append(b, elem...)
	}
	return b
}

// writeVerifyDir writes a two-shard model directory holding every float
// dtype (some with sizes that leave a tail shorter than a word) and integer
// tensors of NaN-like bits, and returns it with the files' sums.
func writeVerifyDir(t *testing.T) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]TensorData{
		shard1: {
			{Name: "embed.bf16", DType: BF16, Shape: []int64{64, 33}, Data: floatBytes(BF16, 64*33, 1)},
			{Name: "norm.bf16", DType: BF16, Shape: []int64{3, 7}, Data: floatBytes(BF16, 21, 2)},
			{Name: "proj.f32", DType: F32, Shape: []int64{5, 9}, Data: floatBytes(F32, 45, 3)},
			{Name: "ids.i16", DType: I16, Shape: []int64{9}, Data: repeated(9, 0x80, 0x7f)},
		},
		shard2: {
			{Name: "half.f16", DType: F16, Shape: []int64{17}, Data: floatBytes(F16, 17, 4)},
			{Name: "wide.f64", DType: F64, Shape: []int64{6}, Data: floatBytes(F64, 6, 5)},
			{Name: "ids.i32", DType: I32, Shape: []int64{5}, Data: repeated(5, 0, 0, 0x80, 0x7f)},
			{Name: "ids.i64", DType: I64, Shape: []int64{3}, Data: repeated(3, 0, 0, 0, 0, 0, 0, 0xf0, 0x7f)},
		},
	}
	sums := map[string]string{}
	for name, ts := range files {
		sum, err := WriteSafetensorsSHA256(filepath.Join(dir, name), ts, map[string]string{"format": "pt"})
		if err != nil {
			t.Fatal(err)
		}
		sums[name] = sum
	}
	return dir, sums
}

// poke overwrites element elem of a tensor of dir/file with b, as damage or
// a diverged run would.
func poke(t *testing.T, dir, file, tensor string, elem int64, b []byte) {
	t.Helper()
	path := filepath.Join(dir, file)
	sf, err := OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := sf.Tensor(tensor)
	sf.Close()
	if !ok {
		t.Fatalf("no tensor %s in %s", tensor, file)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, info.Offset+elem*int64(info.DType.Size())); err != nil {
		t.Fatal(err)
	}
}

// flipBit flips one bit of a file at byte off.
func flipBit(t *testing.T, path string, off int64, bit uint) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func TestVerifyWeights(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(t *testing.T, dir string)
		noSums  bool
		want    []string // substrings of the error; none: it passes
		notWant string
	}{
		{name: "good"},
		{name: "good without sums", noSums: true},
		{name: "one flipped bit", damage: func(t *testing.T, dir string) {
			// The lowest mantissa bit of a bf16 value: still finite, so
			// only the hash can tell.
			sf, _ := OpenSafetensors(filepath.Join(dir, shard1))
			info, _ := sf.Tensor("embed.bf16")
			sf.Close()
			flipBit(t, filepath.Join(dir, shard1), info.Offset+100, 0)
		}, want: []string{shard1 + ": sha256 is ", "but dllm.json records", "re-copy it", "weights_sha256"}, notWant: "non-finite"},
		{name: "flipped bit without sums passes", noSums: true, damage: func(t *testing.T, dir string) {
			sf, _ := OpenSafetensors(filepath.Join(dir, shard1))
			info, _ := sf.Tensor("embed.bf16")
			sf.Close()
			flipBit(t, filepath.Join(dir, shard1), info.Offset+100, 0)
		}},
		{name: "NaN in bf16", noSums: true, damage: func(t *testing.T, dir string) {
			poke(t, dir, shard1, "embed.bf16", 1234, le16(0x7fc0))
		}, want: []string{shard1 + ": tensor embed.bf16 has 1 non-finite value (first at element 1234: NaN)"}, notWant: "sha256"},
		{name: "NaNs in the bf16 tail", noSums: true, damage: func(t *testing.T, dir string) {
			poke(t, dir, shard1, "norm.bf16", 17, le16(0xff81))
			poke(t, dir, shard1, "norm.bf16", 20, le16(0x7f80))
		}, want: []string{"tensor norm.bf16 has 2 non-finite values (first at element 17: NaN)"}},
		{name: "Inf in f32", noSums: true, damage: func(t *testing.T, dir string) {
			poke(t, dir, shard1, "proj.f32", 44, le32(0x7f800000))
		}, want: []string{"tensor proj.f32 has 1 non-finite value (first at element 44: +Inf)"}},
		{name: "NaN in f64 and -Inf in f16", noSums: true, damage: func(t *testing.T, dir string) {
			poke(t, dir, shard2, "half.f16", 3, le16(0xfc00))
			poke(t, dir, shard2, "wide.f64", 5, le64(0x7ff8000000000001))
		}, want: []string{shard2 + ": tensor wide.f64 has 1 non-finite value (first at element 5: NaN), and 1 more tensor has some"}},
		{name: "-Inf in f16", noSums: true, damage: func(t *testing.T, dir string) {
			poke(t, dir, shard2, "half.f16", 3, le16(0xfc00))
		}, want: []string{shard2 + ": tensor half.f16 has 1 non-finite value (first at element 3: -Inf)"}},
		{name: "NaN with sums", damage: func(t *testing.T, dir string) {
			poke(t, dir, shard1, "embed.bf16", 7, le16(0x7fc0))
		}, want: []string{shard1 + ": sha256 is", "tensor embed.bf16 has 1 non-finite value (first at element 7: NaN)"}},
		{name: "missing file", damage: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, shard2))
		}, want: []string{shard2 + ": missing, but dllm.json's weights_sha256 records it"}},
		{name: "unrecorded file is scanned", damage: func(t *testing.T, dir string) {
			data := floatBytes(F32, 8, 9)
			copy(data[4:], le32(0xffc00000))
			if err := WriteSafetensors(filepath.Join(dir, "extra.safetensors"), []TensorData{{Name: "x", DType: F32, Shape: []int64{8}, Data: data}}, nil); err != nil {
				t.Fatal(err)
			}
		}, want: []string{"extra.safetensors: tensor x has 1 non-finite value (first at element 1: NaN)"}, notWant: "sha256"},
		{name: "damaged header", damage: func(t *testing.T, dir string) {
			flipBit(t, filepath.Join(dir, shard2), 8, 1) // '{' becomes 'y'
		}, want: []string{shard2 + ": the header is damaged", shard2 + `: sha256`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, sums := writeVerifyDir(t)
			if tt.noSums {
				sums = nil
			}
			if tt.damage != nil {
				tt.damage(t, dir)
			}
			err := VerifyWeights(context.Background(), dir, sums)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tt.notWant != "" && strings.Contains(err.Error(), tt.notWant) {
				t.Errorf("error %q mentions %q", err, tt.notWant)
			}
		})
	}
}

func TestVerifyWeightsCancelled(t *testing.T) {
	dir, sums := writeVerifyDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := VerifyWeights(ctx, dir, sums); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

func TestVerifyWeightsNotADirectory(t *testing.T) {
	if err := VerifyWeights(context.Background(), filepath.Join(t.TempDir(), "none"), nil); err == nil {
		t.Fatal("no error for a missing directory")
	}
}

// TestVerifyElementAcrossChunks: a bf16 tensor at an odd offset has an
// element across the first chunk boundary; the chunk is cut before it, so
// a NaN there is found, and found once.
func TestVerifyElementAcrossChunks(t *testing.T) {
	const n = verifyChunk // elements: the tensor spans two chunks
	header := fmt.Sprintf(`{"pad":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"BF16","shape":[%d],"data_offsets":[1,%d]}}`, n, 1+2*n)
	for len(header)%8 != 0 {
		header += " "
	}
	dataStart := 8 + len(header)
	// The element whose two bytes are the last of the first chunk and the
	// first of the second.
	elem := (verifyChunk - 1 - dataStart - 1) / 2
	if (dataStart+1+2*elem)+1 != verifyChunk {
		t.Fatalf("bad test layout: element %d does not straddle", elem)
	}
	data := make([]byte, 1+2*n)
	copy(data[1+2*elem:], le16(0x7fc1))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "odd.safetensors"), rawSafetensors(header, data), 0o644); err != nil {
		t.Fatal(err)
	}
	err := VerifyWeights(context.Background(), dir, nil)
	want := fmt.Sprintf("tensor w has 1 non-finite value (first at element %d: NaN)", elem)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

// TestCountNonFinite compares the word-wise count with one element at a
// time, for every float dtype, on values with every exponent and on
// lengths that leave a tail.
func TestCountNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, dt := range []DType{BF16, F16, F32, F64} {
		for _, n := range []int{0, 1, 3, 4, 5, 16, 17, 100} {
			t.Run(fmt.Sprintf("%v/%d", dt, n), func(t *testing.T) {
				b := make([]byte, n*dt.Size())
				for i := range b {
					b[i] = byte(rng.Uint32())
					if rng.IntN(4) == 0 {
						b[i] |= 0x7f // all-ones exponents, often
					}
				}
				wantN, wantFirst := 0, -1
				for i := range n {
					v := loadElement(b[i*dt.Size():], dt)
					if math.IsNaN(v) || math.IsInf(v, 0) {
						wantN++
						if wantFirst < 0 {
							wantFirst = i
						}
					}
				}
				if gotN, gotFirst := countNonFinite(b, dt); gotN != wantN || gotFirst != wantFirst {
					t.Errorf("count %d first %d, want %d, %d", gotN, gotFirst, wantN, wantFirst)
				}
			})
		}
	}
}

// BenchmarkVerifyWeights times VerifyWeights on a 2 GiB bf16 file that was
// just written, so in the page cache: "sha256+scan" with the file's sum
// recorded, "scan" with none. The file is in b.TempDir, removed at the end.
//
//	go test ./model/ -run '^$' -bench VerifyWeights -benchtime 3x
func BenchmarkVerifyWeights(b *testing.B) {
	const rows, cols = 32 << 10, 32 << 10
	pattern := floatBytes(BF16, 1<<20, 1) // 2 MiB of finite values
	write := func(w io.Writer) error {
		for range rows * cols * 2 / len(pattern) {
			if _, err := w.Write(pattern); err != nil {
				return err
			}
		}
		return nil
	}
	dir := b.TempDir()
	path := filepath.Join(dir, SingleFileName)
	sum, err := WriteSafetensorsSHA256(path, []TensorData{{Name: "w", DType: BF16, Shape: []int64{rows, cols}, Stream: write}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		sums map[string]string
	}{{"sha256+scan", map[string]string{SingleFileName: sum}}, {"scan", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(st.Size())
			for b.Loop() {
				if err := VerifyWeights(context.Background(), dir, bc.sums); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
