package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Checkpoint file names, as transformers' save_pretrained writes them.
const (
	SingleFileName = "model.safetensors"
	IndexFileName  = "model.safetensors.index.json"
)

// Checkpoint is a set of safetensors files seen as one tensor namespace: a
// single model.safetensors or the shards of model.safetensors.index.json.
// Like SafetensorsFile, it memory-maps rather than reads.
type Checkpoint struct {
	files   []*SafetensorsFile
	tensors []TensorInfo // shard by shard, each by offset
	byName  map[string]*SafetensorsFile
}

// OpenCheckpoint opens a checkpoint directory (or a single .safetensors
// file). As in transformers, model.safetensors is preferred when both it and
// an index are present.
//
// With an index, every shard it names is opened once and validated, every
// indexed name must exist in its shard, and a tensor found in a shard but not
// indexed to that shard is an error: such a checkpoint is inconsistent, and
// ignoring the extra tensor would hide it from CheckTensors.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return openSingle(dir)
	}
	single := filepath.Join(dir, SingleFileName)
	if _, err := os.Stat(single); err == nil {
		return openSingle(single)
	}
	index := filepath.Join(dir, IndexFileName)
	if _, err := os.Stat(index); err != nil {
		return nil, fmt.Errorf("safetensors: %s: no %s or %s", dir, SingleFileName, IndexFileName)
	}
	return openSharded(dir, index)
}

func openSingle(path string) (*Checkpoint, error) {
	f, err := OpenSafetensors(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{files: []*SafetensorsFile{f}, tensors: f.Tensors(), byName: map[string]*SafetensorsFile{}}
	for _, t := range f.Tensors() {
		c.byName[t.Name] = f
	}
	return c, nil
}

func openSharded(dir, index string) (_ *Checkpoint, err error) {
	b, err := os.ReadFile(index)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", index, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors: %s: empty or missing weight_map", index)
	}
	var shards []string
	for name, shard := range idx.WeightMap {
		// Shards live beside the index; anything else is a path escape.
		if shard == "" || shard != filepath.Base(shard) || shard == "." || shard == ".." {
			return nil, fmt.Errorf("safetensors: %s: tensor %q maps to bad shard name %q", index, name, shard)
		}
		if !slices.Contains(shards, shard) {
			shards = append(shards, shard)
		}
	}
	slices.Sort(shards)

	c := &Checkpoint{byName: make(map[string]*SafetensorsFile, len(idx.WeightMap))}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for _, shard := range shards {
		f, err := OpenSafetensors(filepath.Join(dir, shard))
		if err != nil {
			return nil, err
		}
		c.files = append(c.files, f)
		for _, t := range f.Tensors() {
			if idx.WeightMap[t.Name] != shard {
				return nil, fmt.Errorf("safetensors: %s: tensor %q is not indexed to this shard in %s", f.Path(), t.Name, IndexFileName)
			}
			c.byName[t.Name] = f
		}
		c.tensors = append(c.tensors, f.Tensors()...)
	}
	var missing []string
	for name := range idx.WeightMap {
		if c.byName[name] == nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("safetensors: %s: %d indexed tensor(s) missing from their shards, e.g. %q (in %s)",
			index, len(missing), missing[0], idx.WeightMap[missing[0]])
	}
	return c, nil
}

// Tensors lists all tensors, shard by shard in file order. The slice is
// shared: do not modify it.
func (c *Checkpoint) Tensors() []TensorInfo { return c.tensors }

// Tensor looks a tensor up by name; TensorInfo.File says which shard holds it.
func (c *Checkpoint) Tensor(name string) (TensorInfo, bool) {
	if f := c.byName[name]; f != nil {
		return f.Tensor(name)
	}
	return TensorInfo{}, false
}

// Shapes maps every tensor name to its shape, the form CheckTensors takes.
func (c *Checkpoint) Shapes() map[string][]int64 {
	m := make(map[string][]int64, len(c.tensors))
	for _, t := range c.tensors {
		m[t.Name] = t.Shape
	}
	return m
}

// Bytes returns a zero-copy view of a tensor's data; see
// SafetensorsFile.Bytes for its lifetime.
func (c *Checkpoint) Bytes(name string) ([]byte, error) {
	f := c.byName[name]
	if f == nil {
		return nil, fmt.Errorf("safetensors: no tensor %q in checkpoint", name)
	}
	return f.Bytes(name)
}

// Metadata is the __metadata__ of the first file (shards written together
// carry the same one).
func (c *Checkpoint) Metadata() map[string]string {
	if len(c.files) == 0 {
		return nil
	}
	return c.files[0].Metadata()
}

// Close unmaps every file.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
