package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dllm/diffusion"
	"dllm/model"
)

func TestApplyPreset(t *testing.T) {
	tests := []struct {
		name   string
		yaml   string
		check  func(*Options) bool
		errSub string
	}{
		{"empty", "", func(o *Options) bool { return *o == DefaultOptions() }, ""},
		{"comments only", "# nothing\n", func(o *Options) bool { return *o == DefaultOptions() }, ""},
		{"partial", "block_size: 8\ngeneration:\n  threshold: 0.95\n", func(o *Options) bool {
			s := o.settings(1)
			return o.BlockSize == 8 && s.Generation.MaxStepsPerBlock == 8 && s.Generation.Threshold == 0.95 && s.Generation.TopP == 1
		}, ""},
		{"all", "block_size: 4\nmask_token: \"[MASK]\"\ndtype: f32\nshift: false\nattention: block\nhash: fast\n" +
			"generation: {threshold: 0.8, max_steps_per_block: 2, temperature: 0.7, top_p: 0.95}\n", func(o *Options) bool {
			g := o.Generation
			return o.BlockSize == 4 && o.MaskToken == "[MASK]" && o.DType == "f32" && !o.Shift && o.Hash == HashFast &&
				g == diffusion.Generation{Threshold: 0.8, MaxStepsPerBlock: 2, Temperature: 0.7, TopP: 0.95}
		}, ""},
		{"verify follows the shift", "shift: false\n", func(o *Options) bool { return !o.Shift && !o.Generation.Verify }, ""},
		{"verify off", "generation: {verify: false}\n", func(o *Options) bool { return o.Shift && !o.Generation.Verify }, ""},
		{"verify without the shift", "shift: false\ngeneration: {verify: true}\n", nil, "verify needs shift"},
		{"unknown key", "block_size: 8\nblok_size: 4\n", nil, "field blok_size not found"},
		{"unknown nested key", "generation:\n  top_k: 5\n", nil, "field top_k not found"},
		{"wrong type", "block_size: big\n", nil, "cannot unmarshal"},
		{"bad value", "block_size: 0\n", nil, "block_size 0"},
		{"bad dtype", "dtype: int4\n", nil, `dtype "int4"`},
		{"bad attention", "attention: full\n", nil, `attention "full"`},
		{"bad threshold", "generation: {threshold: 2}\n", nil, "threshold"},
		{"empty mask", "mask_token: \" \"\n", nil, "mask token is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "preset.yaml")
			writeTestFile(t, path, tt.yaml)
			o := DefaultOptions()
			err := o.ApplyPreset(path)
			if tt.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errSub) {
					t.Fatalf("error %v, want one containing %q", err, tt.errSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(&o) {
				t.Errorf("options %+v", o)
			}
		})
	}
}

// The shipped preset must load and describe MiniCPM5-2B's conversion.
func TestMiniCPM5Preset(t *testing.T) {
	o := DefaultOptions()
	if err := o.ApplyPreset("../configs/minicpm5-2b.yaml"); err != nil {
		t.Fatal(err)
	}
	want := DefaultOptions()
	want.DType = "bf16"
	want.Generation.MaxStepsPerBlock = 32
	if o != want {
		t.Errorf("preset gives %+v, want %+v", o, want)
	}
	if err := o.ApplyPreset("../configs/no-such.yaml"); err == nil {
		t.Error("a missing preset loaded")
	}
}

func TestSetFields(t *testing.T) {
	tests := []struct {
		name, in string
		values   map[string]string
		want     string
	}{
		{"replace keeps layout", "{\n  \"a\": 1,\n  \"vocab_size\":   512 ,\n  \"z\": [1, 2]\n}\n",
			map[string]string{"vocab_size": "513"}, "{\n  \"a\": 1,\n  \"vocab_size\":   513 ,\n  \"z\": [1, 2]\n}\n"},
		{"several, nested untouched", `{"dtype":"float32","n":{"dtype":"x"},"torch_dtype":"float32"}`,
			map[string]string{"dtype": `"bfloat16"`, "torch_dtype": `"bfloat16"`}, `{"dtype":"bfloat16","n":{"dtype":"x"},"torch_dtype":"bfloat16"}`},
		{"absent key skipped", `{"a": 1}`, map[string]string{"b": "2"}, `{"a": 1}`},
		{"object value", `{"a": {"b": 1}, "c": 2}`, map[string]string{"a": "null"}, `{"a": null, "c": 2}`},
		{"non-ASCII kept", `{"name": "模型 <|x|>", "v": 1}`, map[string]string{"v": "2"}, `{"name": "模型 <|x|>", "v": 2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values := map[string]json.RawMessage{}
			for k, v := range tt.values {
				values[k] = json.RawMessage(v)
			}
			got, err := setFields([]byte(tt.in), values)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	for _, bad := range []string{`[1]`, `{"a": }`, `{"a": 1`} {
		if _, err := setFields([]byte(bad), nil); err == nil {
			t.Errorf("setFields(%q) accepted bad JSON", bad)
		}
	}
}

func TestConvertFloats(t *testing.T) {
	values := []float32{0, -0.0, 1, -2.5, 3.14159, 1e-8, 65504, 1e6, float32(math.Inf(1)), -1e-40}
	dtypes := []model.DType{model.F32, model.F16, model.BF16}
	for _, in := range dtypes {
		src := make([]byte, len(values)*in.Size())
		for i, v := range values {
			storeFloat(src[i*in.Size():], in, v)
		}
		for _, out := range dtypes {
			dst := make([]byte, len(values)*out.Size())
			convertFloats(dst, out, src, in)
			for i := range values {
				want := roundTo(out, loadFloat(src[i*in.Size():], in))
				if got := loadFloat(dst[i*out.Size():], out); got != want {
					t.Errorf("%v -> %v: [%d] = %v, want %v", in, out, i, got, want)
				}
			}
		}
	}
	// bf16 -> f32 has its own loop; it must be the exact widening.
	src := binary.LittleEndian.AppendUint16(nil, 0x3fc0) // 1.5
	dst := make([]byte, 4)
	convertFloats(dst, model.F32, src, model.BF16)
	if got := math.Float32frombits(binary.LittleEndian.Uint32(dst)); got != 1.5 {
		t.Errorf("bf16 0x3fc0 -> %v, want 1.5", got)
	}
}

func TestMeanRow(t *testing.T) {
	data := make([]byte, 3*2*4) // [[1,2],[3,4],[5,9]] f32
	for i, v := range []float32{1, 2, 3, 4, 5, 9} {
		storeFloat(data[4*i:], model.F32, v)
	}
	if got, err := meanRow(bytes.NewReader(data), model.F32, 3, 2); err != nil || got[0] != 3 || got[1] != 5 {
		t.Errorf("mean %v, %v; want [3 5]", got, err)
	}
	if _, err := meanRow(bytes.NewReader(data[:20]), model.F32, 3, 2); err == nil {
		t.Error("a short matrix gave a mean")
	}
}

func TestRealPathAndWithin(t *testing.T) {
	dir := t.TempDir()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "ln")); err != nil {
		t.Fatal(err)
	}
	got, err := realPath(filepath.Join(dir, "ln", "a", "b"))
	if err != nil || got != filepath.Join(real, "a", "b") {
		t.Errorf("realPath through a link to missing a/b = %q, %v", got, err)
	}
	tests := []struct {
		path, dir string
		want      bool
	}{
		{"/a/b", "/a", true},
		{"/a", "/a", false},
		{"/ab", "/a", false},
		{"/a/..b", "/a", true},
		{"/", "/a", false},
	}
	for _, tt := range tests {
		if got := within(tt.path, tt.dir); got != tt.want {
			t.Errorf("within(%q, %q) = %v, want %v", tt.path, tt.dir, got, tt.want)
		}
	}
}

// Progress goes to the log as lines when it is not a terminal; a
// conversion that writes nothing big logs nothing.
func TestProgressLog(t *testing.T) {
	var log bytes.Buffer
	out := filepath.Join(t.TempDir(), "model")
	o := testOptions(tinyLlama, out)
	o.Log = &log
	if _, err := convertWith(t, context.Background(), o, nil); err != nil {
		t.Fatal(err)
	}
	if log.Len() != 0 {
		t.Errorf("log: %q", log.String())
	}
	p := newProgress(&log, false, 10)
	p.last = p.last.Add(-logEvery)
	p.add(5)
	if !strings.Contains(log.String(), "convert: 5 B of 10 B (50%)") {
		t.Errorf("log: %q", log.String())
	}
}
