package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rawSafetensors builds a file image from a header and data, bypassing the
// writer so tests can produce every kind of corruption.
func rawSafetensors(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

func writeFile(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func f32Bytes(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func TestSafetensorsRoundTrip(t *testing.T) {
	half := []byte{0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b} // 1, -2, 65504
	tensors := []TensorData{
		{Name: "w", DType: F32, Shape: []int64{2, 3}, Data: f32Bytes(1, 2, 3, 4, 5, 6)},
		{Name: "b.bf16", DType: BF16, Shape: []int64{4}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{Name: "step", DType: I64, Shape: []int64{}, Data: []byte{42, 0, 0, 0, 0, 0, 0, 0}},
		{Name: "empty", DType: U8, Shape: []int64{0, 5}},
		{Name: "mask", DType: Bool, Shape: []int64{3}, Data: []byte{1, 0, 1}},
		{Name: "a.f16", DType: F16, Shape: []int64{3}, Stream: func(w io.Writer) error {
			_, err := w.Write(half) // streamed, e.g. converted on the fly
			return err
		}},
	}
	meta := map[string]string{"format": "pt", "note": `<&> "quoted"`}
	path := filepath.Join(t.TempDir(), "rt.safetensors")
	// Writing twice checks that an existing file is replaced.
	for range 2 {
		if err := WriteSafetensors(path, tensors, meta); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left behind: %v", err)
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	if n%8 != 0 || !bytes.HasPrefix(raw[8:], []byte(`{"__metadata__":{"format":"pt","note":"<&> \"quoted\""},"step":`)) {
		t.Errorf("header length %d, header %s", n, raw[8:8+n])
	}

	f, err := OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !maps.Equal(f.Metadata(), meta) {
		t.Errorf("metadata %v", f.Metadata())
	}
	var names []string
	for _, ti := range f.Tensors() {
		names = append(names, ti.Name)
		if ti.Offset%int64(ti.DType.Size()) != 0 {
			t.Errorf("%s at offset %d not aligned to %d", ti.Name, ti.Offset, ti.DType.Size())
		}
	}
	// File order: 8-byte elements, then 4, 2, 1; by name within a size.
	if want := []string{"step", "w", "a.f16", "b.bf16", "empty", "mask"}; !slices.Equal(names, want) {
		t.Errorf("file order %v, want %v", names, want)
	}
	for _, td := range tensors {
		ti, ok := f.Tensor(td.Name)
		if !ok || ti.DType != td.DType || !slices.Equal(ti.Shape, td.Shape) || ti.File != path {
			t.Errorf("%s: got %+v", td.Name, ti)
		}
		b, err := f.Bytes(td.Name)
		want := td.Data
		if td.Stream != nil {
			want = half
		}
		if err != nil || !bytes.Equal(b, want) || int64(len(b)) != ti.Size {
			t.Errorf("%s: bytes %v, %v; want %v", td.Name, b, err, want)
		}
	}
	if len(f.Shapes()) != len(tensors) {
		t.Errorf("Shapes has %d entries", len(f.Shapes()))
	}
	if _, err := f.Bytes("nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown tensor: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Bytes("w"); err == nil {
		t.Error("Bytes after Close succeeded")
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestWriteNoMetadataNoTensors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.safetensors")
	if err := WriteSafetensors(path, nil, nil); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if string(raw[8:]) != "{}      " {
		t.Errorf("file %q", raw)
	}
	f, err := OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(f.Tensors()) != 0 || f.Metadata() != nil {
		t.Errorf("tensors %v, metadata %v", f.Tensors(), f.Metadata())
	}
}

func TestWriteErrors(t *testing.T) {
	ok := TensorData{Name: "ok", DType: F32, Shape: []int64{1}, Data: f32Bytes(1)}
	tests := []struct {
		name    string
		tensors []TensorData
		want    string
	}{
		{"duplicate", []TensorData{ok, ok}, `duplicate tensor "ok"`},
		{"empty name", []TensorData{{DType: F32, Shape: []int64{0}}}, "bad tensor name"},
		{"reserved name", []TensorData{{Name: "__metadata__", DType: F32}}, "bad tensor name"},
		{"no dtype", []TensorData{{Name: "x", Shape: []int64{1}, Data: []byte{1}}}, "invalid dtype"},
		{"size mismatch", []TensorData{{Name: "x", DType: F32, Shape: []int64{2}, Data: f32Bytes(1)}}, "needs 8"},
		{"negative dim", []TensorData{{Name: "x", DType: F32, Shape: []int64{-1}}}, "negative"},
		{"overflow", []TensorData{{Name: "x", DType: F32, Shape: []int64{1 << 62, 4}}}, "overflows"},
		{"short stream", []TensorData{ok, {Name: "s", DType: F32, Shape: []int64{2},
			Stream: func(w io.Writer) error { _, err := w.Write(f32Bytes(1)); return err }}}, "wrote 4 bytes, want 8"},
		{"long stream", []TensorData{ok, {Name: "s", DType: F32, Shape: []int64{1},
			Stream: func(w io.Writer) error { _, err := w.Write(f32Bytes(1, 2)); return err }}}, "exceeds"},
		{"stream error", []TensorData{{Name: "s", DType: F32, Shape: []int64{1},
			Stream: func(io.Writer) error { return errors.New("disk on fire") }}}, "disk on fire"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.safetensors")
			err := WriteSafetensors(path, tt.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "safetensors: ") {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			// Nothing may be left that looks like a checkpoint.
			for _, p := range []string{path, path + ".tmp"} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists after a failed write", p)
				}
			}
		})
	}
}

func TestReadTinyLlama(t *testing.T) {
	cfg := tinyConfig(t)
	ck, err := OpenCheckpoint("../testdata/tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if err := CheckTensors(cfg, ck.Shapes()); err != nil {
		t.Fatal(err)
	}
	if ck.Metadata()["format"] != "pt" {
		t.Errorf("metadata %v", ck.Metadata())
	}
	for _, ti := range ck.Tensors() {
		if ti.DType != F32 {
			t.Errorf("%s is %v, want F32", ti.Name, ti.DType)
		}
	}
	// First values of the final norm, as written by transformers.
	b, err := ck.Bytes("model.norm.weight")
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0.9559621810913086, 0.9534866809844971, 1.0656825304031372, 0.8910425305366516}
	for i, w := range want {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); got != w {
			t.Errorf("model.norm.weight[%d] = %g, want %g", i, got, w)
		}
	}
}

// writeShards writes a two-shard checkpoint with its index into a new dir.
func writeShards(t *testing.T, weightMap map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	shards := map[string][]TensorData{
		"model-00001-of-00002.safetensors": {
			{Name: "a", DType: F32, Shape: []int64{2}, Data: f32Bytes(1, 2)},
			{Name: "b", DType: BF16, Shape: []int64{1}, Data: []byte{0x80, 0x3f}},
		},
		"model-00002-of-00002.safetensors": {
			{Name: "c", DType: F32, Shape: []int64{1}, Data: f32Bytes(3)},
		},
	}
	for name, ts := range shards {
		if err := WriteSafetensors(filepath.Join(dir, name), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 14}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, IndexFileName), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func goodWeightMap() map[string]string {
	return map[string]string{
		"a": "model-00001-of-00002.safetensors",
		"b": "model-00001-of-00002.safetensors",
		"c": "model-00002-of-00002.safetensors",
	}
}

func TestShardedCheckpoint(t *testing.T) {
	dir := writeShards(t, goodWeightMap())
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if n := len(ck.Tensors()); n != 3 {
		t.Errorf("%d tensors, want 3", n)
	}
	for name, want := range map[string][]byte{"a": f32Bytes(1, 2), "b": {0x80, 0x3f}, "c": f32Bytes(3)} {
		b, err := ck.Bytes(name)
		if err != nil || !bytes.Equal(b, want) {
			t.Errorf("%s: %v %v", name, b, err)
		}
	}
	if ti, ok := ck.Tensor("c"); !ok || filepath.Base(ti.File) != "model-00002-of-00002.safetensors" {
		t.Errorf("c: %+v", ti)
	}
	if _, err := ck.Bytes("d"); err == nil {
		t.Error("unknown tensor found")
	}
	if len(ck.Shapes()) != 3 || ck.Metadata()["format"] != "pt" {
		t.Errorf("shapes %v metadata %v", ck.Shapes(), ck.Metadata())
	}
}

func TestShardedCheckpointErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(map[string]string)
		want string
	}{
		{"indexed tensor missing", func(m map[string]string) { m["d"] = "model-00002-of-00002.safetensors" }, `missing from their shards, e.g. "d"`},
		{"tensor not in index", func(m map[string]string) { delete(m, "b") }, `tensor "b" is not indexed`},
		{"tensor indexed to other shard", func(m map[string]string) { m["b"] = "model-00002-of-00002.safetensors" }, `tensor "b" is not indexed`},
		{"shard dropped from index", func(m map[string]string) { m["c"] = "model-00001-of-00002.safetensors" }, `missing from their shards, e.g. "c"`},
		{"shard file missing", func(m map[string]string) { m["d"] = "model-00003.safetensors" }, "no such file"},
		{"path escape", func(m map[string]string) { m["a"] = "../model.safetensors" }, "bad shard name"},
		{"empty weight_map", func(m map[string]string) { clear(m) }, "empty or missing weight_map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := goodWeightMap()
			tt.edit(m)
			ck, err := OpenCheckpoint(writeShards(t, m))
			if err == nil {
				ck.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want %q", err, tt.want)
			}
		})
	}
	if _, err := OpenCheckpoint(t.TempDir()); err == nil || !strings.Contains(err.Error(), IndexFileName) {
		t.Errorf("empty dir: %v", err)
	}
}

func TestOpenCheckpointSingleFilePath(t *testing.T) {
	ck, err := OpenCheckpoint("../testdata/tiny-llama/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if len(ck.Tensors()) != 30 {
		t.Errorf("%d tensors", len(ck.Tensors()))
	}
}

// badHeaders are corrupt files; each must give an error naming the problem.
// FuzzSafetensorsHeader uses them as seeds too.
var badHeaders = []struct {
	name string
	file []byte
	want string
}{
	{"empty file", nil, "too short"},
	{"truncated length", []byte{8, 0, 0}, "too short"},
	{"header length past end", rawSafetensors("{}", nil)[:9], "exceeds the file"},
	{"header length huge", binary.LittleEndian.AppendUint64(nil, 1<<40), "exceeds the 100000000-byte limit"},
	{"header length tiny", rawSafetensors("{", nil), "too small"},
	{"not an object", rawSafetensors("[1,2]", nil), "does not start with '{'"},
	{"bad JSON", rawSafetensors(`{"a":`, nil), "bad header JSON"},
	{"bad JSON 2", rawSafetensors(`{"a" 1}`, nil), "bad header JSON"},
	{"trailing data", rawSafetensors(`{} {}`, nil), "trailing data"},
	{"invalid UTF-8", rawSafetensors("{\"\xff\":1}", nil), "UTF-8"},
	{"duplicate name", rawSafetensors(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, []byte{1, 2}), `duplicate key "a"`},
	{"entry not object", rawSafetensors(`{"a":5}`, nil), "not an object"},
	{"empty name", rawSafetensors(`{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}), "empty tensor name"},
	{"missing dtype", rawSafetensors(`{"a":{"shape":[1],"data_offsets":[0,1]}}`, []byte{1}), "needs dtype"},
	{"unknown dtype", rawSafetensors(`{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}`, []byte{1}), `unsupported dtype "F8_E4M3"`},
	{"negative dim", rawSafetensors(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, []byte{1}), "-1 is not a non-negative integer"},
	{"fractional dim", rawSafetensors(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, []byte{1}), "1.5 is not"},
	{"string offset", rawSafetensors(`{"a":{"dtype":"U8","shape":[1],"data_offsets":["0",1]}}`, []byte{1}), `"0" is not`},
	{"three offsets", rawSafetensors(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, []byte{1}), "has 3 values"},
	{"reversed offsets", rawSafetensors(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}}`, []byte{1}), "reversed"},
	{"offsets out of range", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, f32Bytes(1)), "outside the 4-byte data region"},
	{"overlap", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32Bytes(1, 2)), "overlap"},
	{"size/shape mismatch", rawSafetensors(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, f32Bytes(1, 2)), "hold 8 bytes, but F32 [3] needs 12"},
	{"shape overflow", rawSafetensors(`{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, f32Bytes(1, 2)), "overflows"},
	{"byte size overflow", rawSafetensors(`{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}}`, f32Bytes(1, 2)), "overflows"},
	{"metadata not strings", rawSafetensors(`{"__metadata__":{"format":1}}`, nil), "__metadata__ must map strings to strings"},
}

func TestBadHeaders(t *testing.T) {
	for _, tt := range badHeaders {
		t.Run(tt.name, func(t *testing.T) {
			f, err := OpenSafetensors(writeFile(t, tt.file))
			if err == nil {
				f.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "safetensors: ") {
				t.Errorf("error %q, want %q", err, tt.want)
			}
		})
	}
}

func TestHeaderEdgeCases(t *testing.T) {
	// Accepted: gaps between tensors, trailing bytes, zero-size tensors at
	// any offset, whitespace padding, unknown per-tensor keys.
	h := `{"z":{"dtype":"U8","shape":[0],"data_offsets":[1,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":true},` +
		`"b":{"dtype":"I16","shape":[1],"data_offsets":[2,4]}}   `
	f, err := OpenSafetensors(writeFile(t, rawSafetensors(h, []byte{7, 0, 1, 2, 9})))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := f.Bytes("b"); !bytes.Equal(b, []byte{1, 2}) {
		t.Errorf("b = %v", b)
	}
	if b, err := f.Bytes("z"); err != nil || len(b) != 0 {
		t.Errorf("z = %v, %v", b, err)
	}
}

func TestOpenSafetensorsNotAFile(t *testing.T) {
	if _, err := OpenSafetensors(t.TempDir()); err == nil {
		t.Error("opened a directory")
	}
	if _, err := OpenSafetensors(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("opened a missing file")
	}
}

// TestWriteSafetensorsSHA256: the sum computed while writing is the file's,
// whether the bytes pass through the write buffer or bypass it (a tensor
// larger than the buffer).
func TestWriteSafetensorsSHA256(t *testing.T) {
	stream := func(n int) func(io.Writer) error {
		return func(w io.Writer) error {
			_, err := w.Write(bytes.Repeat([]byte{7}, n))
			return err
		}
	}
	tests := []struct {
		name    string
		tensors []TensorData
	}{
		{"empty", nil},
		{"small", []TensorData{{Name: "w", DType: F32, Shape: []int64{2}, Data: f32Bytes(1, 2)}}},
		{"streamed", []TensorData{{Name: "s", DType: U8, Shape: []int64{100}, Stream: stream(100)}}},
		{"larger than the buffer", []TensorData{
			{Name: "big", DType: U8, Shape: []int64{9 << 20}, Data: bytes.Repeat([]byte{1, 2, 3}, 3<<20)},
			{Name: "big.stream", DType: U8, Shape: []int64{5 << 20}, Stream: stream(5 << 20)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.safetensors")
			got, err := WriteSafetensorsSHA256(path, tt.tensors, map[string]string{"format": "pt"})
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%x", sha256.Sum256(data)); got != want {
				t.Errorf("sha256 %s, the file's is %s", got, want)
			}
		})
	}
}
