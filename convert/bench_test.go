package convert

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"dllm/model"
	"dllm/tokenizer"
)

// BenchmarkConvertMiniCPM5Shape converts a synthetic checkpoint of
// MiniCPM5-2B's shape (5.03 GB of bf16 noise, testdata/minicpm5-2b-shape)
// with tiny-llama's tokenizer (500 ids, so row 500 is a padded mask row).
// It needs about 16 GB of disk, so it runs only when DLLM_BENCH_DIR names a
// directory to hold the checkpoint (kept there for the next run) and the
// outputs (deleted after each conversion):
//
//	DLLM_BENCH_DIR=/tmp/dllm-bench go test ./convert -run '^$' -bench MiniCPM5 -benchtime 3x
func BenchmarkConvertMiniCPM5Shape(b *testing.B) {
	dir := os.Getenv("DLLM_BENCH_DIR")
	if dir == "" {
		b.Skip("DLLM_BENCH_DIR not set")
	}
	from := filepath.Join(dir, "minicpm5-2b-shape")
	if err := writeSynthetic(from); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name, dtype, hash string
	}{
		{"link/hash=full", "bf16", HashFull},
		{"link/hash=fast", "bf16", HashFast},
		{"rewrite-f32/hash=full", "f32", HashFull},
	} {
		b.Run(bc.name, func(b *testing.B) {
			out := filepath.Join(dir, "out")
			for b.Loop() {
				o := DefaultOptions()
				o.From, o.Out, o.DType, o.Hash = from, out, bc.dtype, bc.hash
				p, err := NewPlan(o)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Execute(context.Background()); err != nil {
					b.Fatal(err)
				}
				p.Close()
				b.StopTimer()
				if err := os.RemoveAll(out); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.SetBytes(5_033_537_536)
		})
	}
}

// writeSynthetic writes the synthetic checkpoint unless it is there.
func writeSynthetic(dir string) error {
	weights := filepath.Join(dir, model.SingleFileName)
	if _, err := model.OpenSafetensors(weights); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	copies := [][2]string{
		{"../testdata/minicpm5-2b-shape/config.json", "config.json"},
		{filepath.Join(tinyLlama, tokenizer.TokenizerFile), tokenizer.TokenizerFile},
		{filepath.Join(tinyLlama, tokenizer.TokenizerConfigFile), tokenizer.TokenizerConfigFile},
	}
	for _, c := range copies {
		data, err := os.ReadFile(c[0])
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c[1]), data, 0o644); err != nil {
			return err
		}
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return err
	}
	// Noise from a 64 MiB pool: as incompressible as weights, and cheap.
	pool := make([]byte, 64<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	var tensors []model.TensorData
	for i, s := range model.ExpectedTensors(cfg) {
		n := int64(2)
		for _, d := range s.Shape {
			n *= d
		}
		off := int64(i*4096) % int64(len(pool)/2)
		tensors = append(tensors, model.TensorData{Name: s.Name, DType: model.BF16, Shape: s.Shape,
			Stream: func(w io.Writer) error {
				for left := n; left > 0; {
					k := min(left, int64(len(pool))-off)
					if _, err := w.Write(pool[off : off+k]); err != nil {
						return err
					}
					left -= k
					off = 0
				}
				return nil
			}})
	}
	return model.WriteSafetensors(weights, tensors, map[string]string{"format": "pt"})
}
