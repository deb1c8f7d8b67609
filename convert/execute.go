package convert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"time"

	"dllm/diffusion"
	"dllm/model"
	"dllm/tokenizer"
)

// Result says what Execute did.
type Result struct {
	// Out is the model directory written.
	Out string
	// Done maps each output file to the action actually taken: a planned
	// Link may have become a Reflink or a Copy.
	Done map[string]Action
	// Settings is the dllm.json written.
	Settings diffusion.Settings
	// Elapsed is the wall time of Execute.
	Elapsed time.Duration
}

// Execute writes the model directory. Everything goes into a temporary
// directory beside Out (Out.tmp-XXXX), which is verified (it must load as
// a checkpoint, a tokenizer and dllm settings) and only then renamed to
// Out, so an interrupted or failed conversion never leaves a directory that
// looks like a model; on failure the temporary directory is removed.
func (p *Plan) Execute(ctx context.Context) (res *Result, err error) {
	start := time.Now()
	if p.ckpt == nil {
		return nil, errors.New("convert: the plan is closed")
	}
	parent := filepath.Dir(p.Out)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, filepath.Base(p.Out)+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes 0700
		return nil, fmt.Errorf("convert: %w", err)
	}
	res = &Result{Out: p.Out, Done: map[string]Action{}}
	if err := p.writeAll(ctx, tmp, res); err != nil {
		return nil, fmt.Errorf("convert: writing %s: %w", p.Out, err)
	}
	if err := p.verify(tmp); err != nil {
		return nil, fmt.Errorf("convert: the output failed verification, not installed: %w", err)
	}
	if err := syncTree(tmp); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	if err := p.install(tmp); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// writeAll fills dir with the planned files and dllm.json.
func (p *Plan) writeAll(ctx context.Context, dir string, res *Result) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	full := p.opts.Hash == HashFull

	// Links first: they are instant, and a shard that cannot be linked is
	// copied instead, which hashes it on the way.
	var copies []File
	var toHash []string
	total := int64(0)
	for _, f := range p.Files {
		switch f.Action {
		case Link:
			how, err := p.place(f.Src, filepath.Join(dir, f.Name))
			if err != nil {
				copies = append(copies, f)
				total += f.Size
				continue
			}
			res.Done[f.Name] = how
			toHash = append(toHash, f.Src)
		case Rewrite:
			toHash = append(toHash, f.Src)
			total += f.Size
		}
	}
	if full {
		for _, src := range toHash {
			info, err := os.Stat(src)
			if err != nil {
				return err
			}
			total += info.Size()
		}
	}
	prog := newProgress(p.opts.Log, p.opts.Terminal, total)
	defer prog.finish()

	// The source hash runs beside the copies and rewrites, so on two cores
	// a conversion takes about as long as the slower of the two.
	var sums map[string][]byte
	hashed := make(chan error, 1)
	if full {
		go func() {
			var err error
			sums, err = hashFiles(ctx, toHash, prog)
			hashed <- err
		}()
	} else {
		hashed <- nil
	}
	copySums, rewritten, err := p.writeFiles(ctx, dir, copies, prog, res)
	if err != nil {
		cancel()
	}
	if herr := <-hashed; err == nil && herr != nil {
		err = fmt.Errorf("hashing the source: %w", herr)
	}
	if err != nil {
		return err
	}

	s := p.Settings
	s.CreatedAt = time.Now().UTC().Truncate(time.Second)
	if full {
		maps.Copy(sums, copySums)
		s.Source.SHA256 = checkpointSHA256(p.shards, sums)
		s.WeightsSHA256 = p.weightsSHA256(sums, rewritten)
	} else if s.Source.Fingerprint, err = fingerprint(p.shards); err != nil {
		return err
	}
	if err := s.Save(dir); err != nil {
		return err
	}
	res.Done[diffusion.SettingsFile] = Write
	res.Settings = s
	return nil
}

// weightsSHA256 is dllm.json's weights_sha256: a linked or copied shard
// holds its source's bytes, so it has its source's sum, and a rewritten one
// the sum of what was written.
func (p *Plan) weightsSHA256(src map[string][]byte, rewritten map[string]string) map[string]string {
	out := map[string]string{}
	for _, f := range p.Files {
		switch f.Action {
		case Link:
			out[f.Name] = hex.EncodeToString(src[f.Src])
		case Rewrite:
			out[f.Name] = rewritten[f.Name]
		}
	}
	return out
}

// writeFiles makes every planned file but the links and dllm.json. Shards
// that could not be linked are copied and the others rewritten, hashed on
// the way when a full hash is wanted; it returns the copies' sums by source
// path and the rewritten files' hex sums by name.
func (p *Plan) writeFiles(ctx context.Context, dir string, copies []File, prog *progress, res *Result) (copySums map[string][]byte, rewritten map[string]string, err error) {
	copySums, rewritten = map[string][]byte{}, map[string]string{}
	for _, f := range copies {
		var h hash.Hash
		if p.opts.Hash == HashFull {
			h = sha256.New()
		}
		if err := p.copyFile(ctx, f.Src, filepath.Join(dir, f.Name), h, prog); err != nil {
			return nil, nil, err
		}
		if h != nil {
			copySums[f.Src] = h.Sum(nil)
		}
		res.Done[f.Name] = Copy
	}
	for _, f := range p.Files {
		dst := filepath.Join(dir, f.Name)
		var err error
		switch {
		case f.Action == Rewrite:
			rewritten[f.Name], err = p.rewriteShard(ctx, f.Src, dst, prog)
		case f.Action == Edit && f.Name == model.IndexFileName:
			err = p.writeIndex(f.Src, dst)
		case f.Action == Edit && f.Name == "config.json":
			err = p.editConfig(f.Src, dst)
		case f.Action == Copy || f.Action == Edit: // tokenizer files: edited below
			err = p.copyFile(ctx, f.Src, dst, nil, nil)
		default:
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		res.Done[f.Name] = f.Action
	}
	// The mask token, as transformers reads it (mask_token_id).
	if err := tokenizer.SetMaskToken(dir, p.Mask.Token, p.Mask.ID); err != nil {
		return nil, nil, err
	}
	return copySums, rewritten, nil
}

// copyFile copies src to a new file dst, feeding h when given.
func (p *Plan) copyFile(ctx context.Context, src, dst string, h hash.Hash, prog *progress) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return p.create(dst, func(w io.Writer) error {
		if h != nil {
			w = io.MultiWriter(w, h)
		}
		_, err := io.CopyBuffer(prog.counting(w), ctxReader{ctx, in}, make([]byte, 4<<20))
		return err
	})
}

// writeFile writes a small new file.
func (p *Plan) writeFile(dst string, data []byte) error {
	return p.create(dst, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// create makes dst, lets fill write it and syncs it.
func (p *Plan) create(dst string, fill func(io.Writer) error) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = fill(p.wrap(filepath.Base(dst), f))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(dst), err)
	}
	return nil
}

// ctxReader stops a copy when the context is cancelled (Ctrl-C).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// editConfig copies config.json with vocab_size and the dtype updated
// where they changed, every other byte as it was. The architecture stays,
// so the output still loads as the AR model it was in any HF tool.
func (p *Plan) editConfig(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	values := map[string]json.RawMessage{}
	if p.Mask.How == MaskGrown {
		values["vocab_size"] = json.RawMessage(fmt.Sprint(p.outVocab()))
	}
	if d := torchDType(p.DType); d != "" && p.Config.DType != "" && d != p.Config.DType {
		values["torch_dtype"] = json.RawMessage(`"` + d + `"`)
		values["dtype"] = values["torch_dtype"]
	}
	if data, err = setFields(data, values); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return p.writeFile(dst, data)
}

// verify loads the output the way its readers will.
func (p *Plan) verify(dir string) error {
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return err
	}
	c, err := model.OpenCheckpoint(dir)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := model.CheckTensors(cfg, c.Shapes()); err != nil {
		return err
	}
	s, err := diffusion.LoadSettings(dir)
	if err != nil {
		return err
	}
	if err := s.Validate(cfg.VocabSize); err != nil {
		return err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	if id, ok := tok.TokenID(s.MaskToken); !ok || id != s.MaskTokenID {
		return fmt.Errorf("the tokenizer maps %s to %d (found %v), dllm.json says %d", s.MaskToken, id, ok, s.MaskTokenID)
	}
	return nil
}

// syncTree makes every file of the flat directory dir durable before it is
// renamed into place.
func syncTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	syncDir(dir)
	return nil
}

// syncDir makes renames in dir durable; filesystems that refuse to fsync a
// directory are not an error, the files themselves being synced.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// install moves the finished directory to Out. A model being replaced is
// swapped out atomically where the system allows it, else moved aside
// first; either way it is deleted only once the new one is in place.
func (p *Plan) install(tmp string) error {
	parent := filepath.Dir(p.Out)
	defer syncDir(parent)
	if !p.Replace {
		return os.Rename(tmp, p.Out)
	}
	old := tmp // after the exchange the old model is here
	if err := exchange(tmp, p.Out); err != nil {
		if old, err = os.MkdirTemp(parent, filepath.Base(p.Out)+".old-"); err != nil {
			return err
		}
		if err := os.Rename(p.Out, old); err != nil {
			os.Remove(old)
			return err
		}
		if err := os.Rename(tmp, p.Out); err != nil {
			if rerr := os.Rename(old, p.Out); rerr != nil {
				return fmt.Errorf("%w; the old model is left at %s", err, old)
			}
			return err
		}
	}
	if err := os.RemoveAll(old); err != nil && !errors.Is(err, fs.ErrNotExist) && p.opts.Log != nil {
		fmt.Fprintf(p.opts.Log, "convert: warning: the replaced model is left at %s: %v\n", old, err)
	}
	return nil
}
