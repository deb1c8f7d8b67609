package convert

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"dllm/diffusion"
	"dllm/model"
)

// Hash modes for the source checkpoint's identity in dllm.json.
const (
	// HashFull is a full sha256 of the weights, read in parallel with the
	// conversion (or during the copy when one happens). It also records
	// weights_sha256, the sum of every weights file of the output, for
	// model.VerifyWeights: a linked or copied file's is its source's, a
	// rewritten file's is taken from the bytes as they are written.
	HashFull = "full"
	// HashFast hashes only the safetensors headers and file sizes. No
	// weights file is read in full, so no weights_sha256 is recorded: the
	// output can then only be scanned for non-finite values, not checked
	// for damage.
	HashFast = "fast"
)

// Options say what Convert reads, what it writes and the diffusion settings
// it records. Start from DefaultOptions, then apply a preset and flags.
type Options struct {
	// From is the HuggingFace checkpoint directory; Out the model directory
	// to create.
	From, Out string
	// BlockSize is the diffusion block length.
	BlockSize int
	// MaskToken is the mask token's spelling.
	MaskToken string
	// DType is the output weights' dtype: "auto" keeps each tensor's dtype,
	// otherwise bf16, f16 or f32 (or their torch names).
	DType string
	// Shift and Attention are recorded in dllm.json as given.
	Shift     bool
	Attention string
	// Generation holds the sampler defaults; a MaxStepsPerBlock of 0 means
	// BlockSize, so that a preset need not repeat the block size.
	Generation diffusion.Generation
	// Hash is HashFull or HashFast.
	Hash string
	// Force replaces an existing output model directory.
	Force bool
	// CreatedBy is recorded in dllm.json ("dllm <version>").
	CreatedBy string
	// Log receives the progress and is where Plan.Print is usually sent;
	// nil discards. Terminal makes progress a redrawn bar instead of lines.
	Log      io.Writer
	Terminal bool
}

// DefaultOptions are the settings used when neither a preset nor a flag
// says otherwise: those of configs/minicpm5-2b.yaml, except that the dtype
// is kept as it is.
func DefaultOptions() Options {
	return Options{
		BlockSize:  32,
		MaskToken:  diffusion.DefaultMaskToken,
		DType:      "auto",
		Shift:      true,
		Attention:  diffusion.AttentionBlock,
		Generation: diffusion.DefaultGeneration(0, true), // 0 steps: the block size
		Hash:       HashFull,
	}
}

// preset mirrors a configs/*.yaml file. Pointers tell an absent key, which
// leaves the option as it was, from a zero value.
type preset struct {
	BlockSize  *int    `yaml:"block_size"`
	MaskToken  *string `yaml:"mask_token"`
	DType      *string `yaml:"dtype"`
	Shift      *bool   `yaml:"shift"`
	Attention  *string `yaml:"attention"`
	Hash       *string `yaml:"hash"`
	Generation *struct {
		Threshold        *float64 `yaml:"threshold"`
		MaxStepsPerBlock *int     `yaml:"max_steps_per_block"`
		Temperature      *float64 `yaml:"temperature"`
		TopP             *float64 `yaml:"top_p"`
		Verify           *bool    `yaml:"verify"`
	} `yaml:"generation"`
}

// ApplyPreset reads a YAML preset and sets the options it names. Unknown
// keys are errors, so a misspelt key cannot silently leave a default.
func (o *Options) ApplyPreset(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("convert: preset: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var p preset
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) { // EOF: empty file
		return fmt.Errorf("convert: preset %s: %w", path, err)
	}
	set(&o.BlockSize, p.BlockSize)
	set(&o.MaskToken, p.MaskToken)
	set(&o.DType, p.DType)
	set(&o.Shift, p.Shift)
	set(&o.Attention, p.Attention)
	set(&o.Hash, p.Hash)
	if g := p.Generation; g != nil {
		set(&o.Generation.Threshold, g.Threshold)
		set(&o.Generation.MaxStepsPerBlock, g.MaxStepsPerBlock)
		set(&o.Generation.Temperature, g.Temperature)
		set(&o.Generation.TopP, g.TopP)
	}
	// Verify follows the shift unless the preset sets it: it needs one.
	o.Generation.Verify = o.Shift
	if p.Generation != nil && p.Generation.Verify != nil {
		o.Generation.Verify = *p.Generation.Verify
	}
	if err := o.check(); err != nil {
		return fmt.Errorf("preset %s: %w", path, err)
	}
	return nil
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// check validates the options that do not depend on the checkpoint, so a
// bad preset or flag fails before anything is opened.
func (o *Options) check() error {
	if _, err := parseDType(o.DType); err != nil {
		return err
	}
	if o.Hash != HashFull && o.Hash != HashFast {
		return fmt.Errorf("convert: hash %q: want %s or %s", o.Hash, HashFull, HashFast)
	}
	if strings.TrimSpace(o.MaskToken) == "" {
		return errors.New("convert: the mask token is empty")
	}
	if o.BlockSize < 1 {
		return fmt.Errorf("convert: block_size %d: want at least 1 (--block-size, or block_size in the preset)", o.BlockSize)
	}
	// The rest is dllm.json's own validation, on a settings value built as
	// Convert will build it.
	s := o.settings(0)
	return s.Validate(0)
}

// settings builds dllm.json's content, less what the checkpoint decides.
func (o *Options) settings(maskID int) diffusion.Settings {
	g := o.Generation
	if g.MaxStepsPerBlock == 0 {
		g.MaxStepsPerBlock = o.BlockSize
	}
	s := diffusion.NewSettings(maskID, o.MaskToken, o.BlockSize, o.Shift)
	s.Attention, s.CreatedBy, s.Generation = o.Attention, o.CreatedBy, g
	return *s
}

// parseDType maps a --dtype value to a safetensors dtype; 0 means "auto".
func parseDType(s string) (model.DType, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return 0, nil
	case "bf16", "bfloat16":
		return model.BF16, nil
	case "f16", "fp16", "float16", "half":
		return model.F16, nil
	case "f32", "fp32", "float32", "float":
		return model.F32, nil
	}
	return 0, fmt.Errorf("convert: dtype %q: want auto, bf16, f16 or f32", s)
}

// torchDType is config.json's spelling of a dtype.
func torchDType(d model.DType) string {
	switch d {
	case model.BF16:
		return "bfloat16"
	case model.F16:
		return "float16"
	case model.F32:
		return "float32"
	}
	return ""
}
