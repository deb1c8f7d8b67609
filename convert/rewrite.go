package convert

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"dllm/model"
)

// rewriteShard writes the tensors of one source shard to dst in their
// output dtypes, the grown ones with the mask row appended, and with a full
// hash returns the hex sha256 of what it wrote. Tensors are read a chunk at
// a time with pread rather than through the checkpoint's mapping, so that
// neither the heap nor the resident set grows with the checkpoint's size.
func (p *Plan) rewriteShard(ctx context.Context, shard, dst string, prog *progress) (string, error) {
	src, err := os.Open(shard)
	if err != nil {
		return "", err
	}
	defer src.Close()
	var tensors []model.TensorData
	for _, t := range p.ckpt.Tensors() {
		if t.File != shard {
			continue
		}
		shape := append([]int64(nil), t.Shape...)
		if p.grows(t.Name) {
			shape[0]++
		}
		tensors = append(tensors, model.TensorData{
			Name:   t.Name,
			DType:  p.outDType(t),
			Shape:  shape,
			Stream: p.tensorStream(ctx, src, t, filepath.Base(dst), prog),
		})
	}
	meta := map[string]string{}
	for k, v := range p.ckpt.Metadata() {
		meta[k] = v
	}
	if meta["format"] == "" {
		meta["format"] = "pt" // transformers refuses files without it
	}
	if p.opts.Hash != HashFull {
		return "", model.WriteSafetensors(dst, tensors, meta)
	}
	return model.WriteSafetensorsSHA256(dst, tensors, meta)
}

// tensorStream returns the Stream of one output tensor, read from src.
func (p *Plan) tensorStream(ctx context.Context, src io.ReaderAt, t model.TensorInfo, file string, prog *progress) func(io.Writer) error {
	return func(w io.Writer) error {
		w = p.wrap(file, prog.counting(w))
		out := p.outDType(t)
		if err := writeConverted(ctx, w, io.NewSectionReader(src, t.Offset, t.Size), t.DType, out); err != nil {
			return err
		}
		if !p.grows(t.Name) {
			return nil
		}
		mean, err := meanRow(io.NewSectionReader(src, t.Offset, t.Size), t.DType, int(t.Shape[0]), int(t.Shape[1]))
		if err != nil {
			return err
		}
		row := make([]byte, len(mean)*out.Size())
		for c, f := range mean {
			storeFloat(row[c*out.Size():], out, f)
		}
		_, err = w.Write(row)
		return err
	}
}

// writeConverted copies r, elements of dtype in, to w as dtype out. The
// next block is read and converted while the last is written.
func writeConverted(ctx context.Context, w io.Writer, r io.Reader, in, out model.DType) error {
	elems := blockSize / 4 // out blocks of at most blockSize bytes
	raw := make([]byte, elems*in.Size())
	return pipe(ctx, elems*out.Size(), func(buf []byte) (int, error) {
		if in == out {
			return readBlock(r, buf)
		}
		n, err := readBlock(r, raw)
		k := n / in.Size()
		convertFloats(buf[:k*out.Size()], out, raw[:n], in)
		return k * out.Size(), err
	}, func(b []byte) error {
		_, err := w.Write(b)
		return err
	})
}

// convertFloats converts elements between floating dtypes. Widening from
// bf16, the common case (bf16 checkpoints trained in f32), is a shift and
// gets its own loop.
func convertFloats(dst []byte, out model.DType, src []byte, in model.DType) {
	n := len(src) / in.Size()
	if in == model.BF16 && out == model.F32 {
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(binary.LittleEndian.Uint16(src[2*i:]))<<16)
		}
		return
	}
	inSize, outSize := in.Size(), out.Size()
	for i := 0; i < n; i++ {
		storeFloat(dst[i*outSize:], out, loadFloat(src[i*inSize:], in))
	}
}

// writeIndex writes model.safetensors.index.json for rewritten shards:
// the same weight map, with total_size recomputed from the files written.
func (p *Plan) writeIndex(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var idx struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	if idx.Metadata == nil {
		idx.Metadata = map[string]any{}
	}
	var total int64
	for _, shard := range p.shards {
		c, err := model.OpenSafetensors(filepath.Join(filepath.Dir(dst), filepath.Base(shard)))
		if err != nil {
			return err
		}
		for _, t := range c.Tensors() {
			total += t.Size
		}
		c.Close()
	}
	idx.Metadata["total_size"] = total
	// Keys come out sorted, as transformers writes them (sort_keys=True).
	out, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return p.writeFile(dst, append(out, '\n'))
}
