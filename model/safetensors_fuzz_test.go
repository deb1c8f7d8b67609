package model

import (
	"bytes"
	"testing"
)

// FuzzSafetensorsHeader feeds arbitrary file images to the header parser:
// it must never panic, and whatever it accepts must be safe to slice.
func FuzzSafetensorsHeader(f *testing.F) {
	for _, tt := range badHeaders {
		f.Add(tt.file)
	}
	f.Add(rawSafetensors(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},`+
		`"b":{"dtype":"BF16","shape":[1,1],"data_offsets":[8,10]}}      `, make([]byte, 10)))
	f.Add(rawSafetensors(`{"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"e":{"dtype":"BOOL","shape":[0],"data_offsets":[8,8]}}`, make([]byte, 8)))
	f.Add(rawSafetensors(`{}`, nil))

	f.Fuzz(func(t *testing.T, file []byte) {
		tensors, meta, err := readHeader(bytes.NewReader(file), int64(len(file)), "fuzz")
		if err != nil {
			return
		}
		sf := newSafetensorsFile("fuzz", file, nil, tensors, meta)
		var end int64
		for _, ti := range sf.Tensors() {
			b, err := sf.Bytes(ti.Name)
			if err != nil {
				t.Fatalf("accepted tensor %q unreadable: %v", ti.Name, err)
			}
			if int64(len(b)) != ti.Size || ti.Size != numElements(ti.Shape)*int64(ti.DType.Size()) {
				t.Fatalf("tensor %q: %d bytes, info %+v", ti.Name, len(b), ti)
			}
			if ti.Size > 0 {
				if ti.Offset < end {
					t.Fatalf("tensor %q overlaps its predecessor", ti.Name)
				}
				end = ti.Offset + ti.Size
			}
		}
	})
}
