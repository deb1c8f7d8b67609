// Package convert turns a HuggingFace Llama-family checkpoint into a dllm
// model directory: the same weights (hard-linked when they need no change),
// a mask token, and dllm.json with the diffusion settings.
//
// A conversion is planned first (NewPlan: everything is validated and every
// decision taken, nothing written), then executed into a temporary
// directory beside the output that is renamed into place only once its
// content has been verified.
package convert

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"dllm/diffusion"
	"dllm/model"
	"dllm/tokenizer"
)

// Action is what happens to one file of the output.
type Action string

// The actions, from cheapest to dearest.
const (
	// Link hard-links the source file; when that fails (another
	// filesystem), it is reflinked, and failing that copied.
	Link Action = "link"
	// Reflink is how a Link was done when hard links failed; never planned.
	Reflink Action = "reflink"
	// Copy copies a small file byte for byte.
	Copy Action = "copy"
	// Edit copies a small JSON file with some fields changed.
	Edit Action = "edit"
	// Rewrite writes a weights file anew, tensor by tensor.
	Rewrite Action = "rewrite"
	// Write creates a file that has no source.
	Write Action = "write"
)

// File is one file of the output directory.
type File struct {
	// Name is the file's name in the output directory.
	Name string
	// Src is the file it comes from; "" for a new file.
	Src    string
	Action Action
	// Size is the size of the source, or the estimated size written.
	Size int64
	// Why explains an Edit or Rewrite.
	Why string
}

// Mask token decisions.
const (
	// MaskExisting: the tokenizer already has the token; nothing changes.
	MaskExisting = "existing"
	// MaskPadded: an embedding row past the tokenizer's ids (padding no
	// text ever produces) becomes the mask token; the weights are kept.
	MaskPadded = "padded"
	// MaskGrown: no spare row, so the embedding (and an untied lm_head)
	// gets one more row, the mean of the others.
	MaskGrown = "grown"
)

// Mask is the mask token decision.
type Mask struct {
	Token string
	ID    int
	// How is MaskExisting, MaskPadded or MaskGrown.
	How string
	// TokenizerIDs is the number of ids the tokenizer defines (its largest
	// id plus one); Rows is the number of embedding rows of the source.
	TokenizerIDs, Rows int
}

// Plan is a validated conversion. It holds the source checkpoint open
// (memory-mapped); Close it when done.
type Plan struct {
	// From and Out are absolute.
	From, Out string
	Config    *model.Config
	// SourceDTypes lists the dtypes of the source tensors, e.g. "BF16".
	SourceDTypes string
	// DType is the output dtype of every floating tensor; 0 keeps them.
	DType model.DType
	// WeightBytes is the size of the source safetensors files.
	WeightBytes int64
	Mask        Mask
	Files       []File
	// Replace is set when Out exists and is to be replaced (--force).
	Replace bool
	// Need is the bytes the output takes on its filesystem, Free what is
	// free there (-1 if unknown).
	Need, Free int64
	// Settings is dllm.json less the source hash and the creation time,
	// which only Execute knows.
	Settings diffusion.Settings

	opts    Options
	ckpt    *model.Checkpoint
	shards  []string // source safetensors files, by name
	sharded bool     // an index names the shards
	// Test hooks: wrap sees every byte written to the output; place links
	// or clones a file, or fails so that it is copied.
	wrap  func(name string, w io.Writer) io.Writer
	place func(src, dst string) (Action, error)
}

// Files a model directory holds besides the weights, copied when present.
// The license travels with the weights it governs.
var optionalFiles = []string{
	"generation_config.json",
	tokenizer.TokenizerConfigFile,
	tokenizer.ChatTemplateFile,
	"special_tokens_map.json",
	"LICENSE", "LICENSE.txt", "LICENSE.md", "NOTICE",
}

// NewPlan validates the input and the output location and takes every
// decision; it writes nothing.
func NewPlan(opts Options) (_ *Plan, err error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	p := &Plan{opts: opts, wrap: func(_ string, w io.Writer) io.Writer { return w }, place: placeFile}
	p.DType, _ = parseDType(opts.DType) // check accepted it
	if err := p.resolvePaths(); err != nil {
		return nil, err
	}
	if p.Config, err = model.LoadConfig(p.From); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("convert: %s has no config.json: not a HuggingFace checkpoint", p.From)
		}
		return nil, fmt.Errorf("convert: %w", err)
	}
	if p.ckpt, err = model.OpenCheckpoint(p.From); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if err := model.CheckTensors(p.Config, p.ckpt.Shapes()); err != nil {
		return nil, fmt.Errorf("convert: %s: %w", p.From, err)
	}
	if err := p.checkDTypes(); err != nil {
		return nil, err
	}
	tok, err := tokenizer.Load(p.From)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("convert: %s has no %s: a model directory needs its tokenizer", p.From, tokenizer.TokenizerFile)
		}
		return nil, fmt.Errorf("convert: %s: %w", p.From, err)
	}
	if p.Mask, err = chooseMask(p.Config, tok, opts.MaskToken); err != nil {
		return nil, fmt.Errorf("convert: %s: %w", p.From, err)
	}
	if err := p.planFiles(); err != nil {
		return nil, err
	}
	p.Settings = opts.settings(p.Mask.ID)
	p.Settings.Source = diffusion.Source{Path: p.From, Architecture: p.Config.Architecture}
	if err := p.Settings.Validate(p.outVocab()); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	if err := p.checkSpace(); err != nil {
		return nil, err
	}
	return p, nil
}

// Close releases the source checkpoint.
func (p *Plan) Close() error {
	if p.ckpt == nil {
		return nil
	}
	err := p.ckpt.Close()
	p.ckpt = nil
	return err
}

// resolvePaths makes From and Out absolute and refuses outputs that would
// overwrite the input or could be something other than a model directory.
func (p *Plan) resolvePaths() error {
	o := p.opts
	if o.From == "" || o.Out == "" {
		return errors.New("convert: both the input (--from) and the output (--out) directory are needed")
	}
	from, err := realPath(o.From)
	if err != nil {
		return fmt.Errorf("convert: input: %w", err)
	}
	info, err := os.Stat(from)
	if err != nil {
		return fmt.Errorf("convert: input: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("convert: input %s is not a directory", o.From)
	}
	out, err := realPath(o.Out)
	if err != nil {
		return fmt.Errorf("convert: output: %w", err)
	}
	switch {
	case out == from:
		return fmt.Errorf("convert: the output %s is the input directory", o.Out)
	case within(out, from):
		return fmt.Errorf("convert: the output %s is inside the input %s", o.Out, o.From)
	case within(from, out):
		// --force would delete the input along with the old output.
		return fmt.Errorf("convert: the input %s is inside the output %s", o.From, o.Out)
	}
	p.From, p.Out = from, out
	info, err = os.Lstat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("convert: output: %w", err)
	}
	if !o.Force {
		return fmt.Errorf("convert: the output %s already exists; pass --force to replace it", o.Out)
	}
	if !info.IsDir() {
		return fmt.Errorf("convert: the output %s exists and is not a directory; not replacing it", o.Out)
	}
	// --force replaces models, not whatever directory a typo names.
	entries, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("convert: output: %w", err)
	}
	if len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(out, diffusion.SettingsFile)); err != nil {
			return fmt.Errorf("convert: refusing to replace %s: it is not empty and holds no %s, so it is not a dllm model directory",
				o.Out, diffusion.SettingsFile)
		}
	}
	p.Replace = true
	return nil
}

// realPath is the absolute path with symlinks resolved, also for a path
// that does not exist yet (resolved up to its deepest existing ancestor),
// so that an output reached through a link is still caught inside the input.
func realPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	var rest []string
	for dir := abs; ; dir = filepath.Dir(dir) {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			slices.Reverse(rest)
			return filepath.Join(append([]string{real}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || dir == filepath.Dir(dir) {
			return "", err
		}
		rest = append(rest, filepath.Base(dir))
	}
}

// within reports whether path lies strictly inside dir.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// checkDTypes records the source dtypes and refuses weights that are not
// floating point: such a checkpoint is quantised, which dllm does not run.
func (p *Plan) checkDTypes() error {
	var names []string
	for _, t := range p.ckpt.Tensors() {
		if !slices.Contains(names, t.DType.String()) {
			names = append(names, t.DType.String())
		}
		if t.DType != model.F32 && t.DType != model.F16 && t.DType != model.BF16 {
			return fmt.Errorf("convert: tensor %q is %v; only F32, F16 and BF16 weights are supported", t.Name, t.DType)
		}
	}
	slices.Sort(names)
	p.SourceDTypes = strings.Join(names, "+")
	return nil
}

// outVocab is the number of embedding rows of the output.
func (p *Plan) outVocab() int {
	if p.Mask.How == MaskGrown {
		return p.Config.VocabSize + 1
	}
	return p.Config.VocabSize
}

// grows reports whether the tensor gains the mask token's row.
func (p *Plan) grows(name string) bool {
	return p.Mask.How == MaskGrown && (name == embedName || name == headName && !p.Config.TieWordEmbeddings)
}

// outDType is the dtype tensor t is written in.
func (p *Plan) outDType(t model.TensorInfo) model.DType {
	if p.DType != 0 {
		return p.DType
	}
	return t.DType
}

// planFiles lists the output files and how each is made.
func (p *Plan) planFiles() error {
	for _, t := range p.ckpt.Tensors() {
		if !slices.Contains(p.shards, t.File) {
			p.shards = append(p.shards, t.File)
		}
	}
	slices.Sort(p.shards)
	_, err := os.Stat(filepath.Join(p.From, model.SingleFileName))
	p.sharded = err != nil // OpenCheckpoint prefers the single file
	rewritten := false
	for _, shard := range p.shards {
		info, err := os.Stat(shard)
		if err != nil {
			return fmt.Errorf("convert: %w", err)
		}
		p.WeightBytes += info.Size()
		f := File{Name: filepath.Base(shard), Src: shard, Action: Link, Size: info.Size()}
		if why := p.rewriteReason(shard); why != "" {
			f.Action, f.Size, f.Why = Rewrite, p.outShardSize(shard), why
			rewritten = true
		}
		p.Files = append(p.Files, f)
	}
	if p.sharded {
		f := File{Name: model.IndexFileName, Src: filepath.Join(p.From, model.IndexFileName), Action: Copy}
		if rewritten {
			f.Action, f.Why = Edit, "total_size"
		}
		p.Files = append(p.Files, f)
	}

	cfg := File{Name: "config.json", Src: filepath.Join(p.From, "config.json"), Action: Copy}
	var why []string
	if p.Mask.How == MaskGrown {
		why = append(why, fmt.Sprintf("vocab_size %d -> %d", p.Config.VocabSize, p.outVocab()))
	}
	// A config that declares no dtype is left so; HF then loads float32.
	if d := torchDType(p.DType); d != "" && p.Config.DType != "" && d != p.Config.DType {
		why = append(why, "dtype "+d)
	}
	if len(why) > 0 {
		cfg.Action, cfg.Why = Edit, strings.Join(why, ", ")
	}
	p.Files = append(p.Files, cfg)

	tok := File{Name: tokenizer.TokenizerFile, Src: filepath.Join(p.From, tokenizer.TokenizerFile), Action: Copy}
	addsMask := p.Mask.How != MaskExisting
	addWhy := fmt.Sprintf("adds %s as special token %d", p.Mask.Token, p.Mask.ID)
	if addsMask {
		tok.Action, tok.Why = Edit, addWhy
	}
	p.Files = append(p.Files, tok)
	for _, name := range optionalFiles {
		src := filepath.Join(p.From, name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		f := File{Name: name, Src: src, Action: Copy}
		if name == tokenizer.TokenizerConfigFile && addsMask {
			f.Action, f.Why = Edit, addWhy
		}
		p.Files = append(p.Files, f)
	}
	p.Files = append(p.Files, File{Name: diffusion.SettingsFile, Action: Write})
	for i := range p.Files {
		if f := &p.Files[i]; f.Action == Copy || f.Action == Edit {
			info, err := os.Stat(f.Src)
			if err != nil {
				return fmt.Errorf("convert: %w", err)
			}
			f.Size = info.Size()
		}
	}
	return nil
}

// rewriteReason says why a shard cannot be linked as it is, or "".
func (p *Plan) rewriteReason(shard string) string {
	var why []string
	for _, t := range p.ckpt.Tensors() {
		if t.File != shard {
			continue
		}
		if p.grows(t.Name) {
			why = append(why, "adds a row to "+t.Name)
		}
		if d := p.outDType(t); d != t.DType && !slices.Contains(why, "dtype "+d.String()) {
			why = append(why, "dtype "+d.String())
		}
	}
	return strings.Join(why, ", ")
}

// outShardSize is the data size of a rewritten shard; the header, a few
// kilobytes, is left out of the estimate.
func (p *Plan) outShardSize(shard string) int64 {
	var n int64
	for _, t := range p.ckpt.Tensors() {
		if t.File != shard {
			continue
		}
		elems := t.Size / int64(t.DType.Size())
		if p.grows(t.Name) {
			elems += t.Shape[1]
		}
		n += elems * int64(p.outDType(t).Size())
	}
	return n
}

// checkSpace refuses a conversion whose output cannot fit, before anything
// is written; a link costs nothing when source and output share a
// filesystem.
func (p *Plan) checkSpace() error {
	parent := existingAncestor(filepath.Dir(p.Out))
	shared := sameDevice(p.From, parent)
	for _, f := range p.Files {
		if f.Action != Link || !shared {
			p.Need += f.Size
		}
	}
	p.Free = freeBytes(parent)
	if p.Free >= 0 && p.Need > p.Free {
		return fmt.Errorf("convert: the output needs %s but only %s is free on %s's filesystem",
			fmtBytes(p.Need), fmtBytes(p.Free), parent)
	}
	return nil
}

func existingAncestor(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil || dir == filepath.Dir(dir) {
			return dir
		}
		dir = filepath.Dir(dir)
	}
}

// Print writes the plan for people: the input, the decisions, and what
// happens to each file.
func (p *Plan) Print(w io.Writer) {
	c := p.Config
	fmt.Fprintf(w, "input:     %s\n", p.From)
	fmt.Fprintf(w, "           %s, %s parameters, %s, %s in %d file(s)\n",
		c.Architecture, fmtCount(c.NumParams()), p.SourceDTypes, fmtBytes(p.WeightBytes), len(p.shards))
	fmt.Fprintf(w, "           %d layers, hidden %d, vocab %d; tokenizer defines %d ids\n",
		c.NumHiddenLayers, c.HiddenSize, c.VocabSize, p.Mask.TokenizerIDs)
	m := p.Mask
	switch m.How {
	case MaskExisting:
		fmt.Fprintf(w, "mask:      %s = %d, already in the tokenizer\n", m.Token, m.ID)
	case MaskPadded:
		fmt.Fprintf(w, "mask:      %s = %d, a padded row no text produces (rows %d..%d are unused); weights unchanged\n",
			m.Token, m.ID, m.TokenizerIDs, m.Rows-1)
	case MaskGrown:
		fmt.Fprintf(w, "mask:      %s = %d, a new row (no padded row is free), initialised to the mean row; vocab_size %d -> %d\n",
			m.Token, m.ID, m.Rows, m.Rows+1)
	}
	dt := "kept (" + p.SourceDTypes + ")"
	if p.DType != 0 && p.SourceDTypes != p.DType.String() {
		dt = p.SourceDTypes + " -> " + p.DType.String()
	}
	fmt.Fprintf(w, "dtype:     %s\n", dt)
	s := p.Settings
	fmt.Fprintf(w, "diffusion: block_size %d, attention %s, shift %v; threshold %g, max_steps_per_block %d, temperature %g, top_p %g, verify %v\n",
		s.BlockSize, s.Attention, s.Shift, s.Generation.Threshold, s.Generation.MaxStepsPerBlock, s.Generation.Temperature, s.Generation.TopP, s.Generation.Verify)
	hash := "full sha256 of the weights"
	if p.opts.Hash == HashFast {
		hash = "fast fingerprint (headers and sizes)"
	}
	fmt.Fprintf(w, "hash:      %s\n", hash)
	out := p.Out
	if p.Replace {
		out += " (replaces the existing model)"
	}
	fmt.Fprintf(w, "output:    %s\n", out)
	free := "unknown"
	if p.Free >= 0 {
		free = fmtBytes(p.Free)
	}
	fmt.Fprintf(w, "space:     %s needed, %s free\n", fmtBytes(p.Need), free)
	fmt.Fprintf(w, "files:\n")
	for _, f := range p.Files {
		line := fmt.Sprintf("  %-8s %-34s %10s", f.Action, f.Name, fmtBytes(f.Size))
		if f.Action == Write {
			line = fmt.Sprintf("  %-8s %s", f.Action, f.Name)
		}
		if f.Why != "" {
			line += "  (" + f.Why + ")"
		}
		fmt.Fprintln(w, line)
	}
}

// fmtCount writes a parameter count as model cards do (2.52B, 1.10M).
func fmtCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}

// fmtBytes writes a size in decimal units, as disks are sold and HF's hub
// shows checkpoint sizes.
func fmtBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %cB", float64(n)/float64(div), "kMGTP"[exp])
}
