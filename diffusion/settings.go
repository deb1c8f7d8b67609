// Package diffusion holds what turns a Llama-family checkpoint into a
// block-diffusion model: the settings stored beside its weights in dllm.json,
// which the converter writes and the trainer, sampler and server read.
package diffusion

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// SettingsFile is the name of the settings file in a model directory.
const SettingsFile = "dllm.json"

// FormatVersion is the dllm.json format this package reads and writes. It
// changes whenever an older reader would misread a newer file.
const FormatVersion = 1

// DefaultMaskToken is the mask token's spelling when none is chosen; dllm's
// convention, also used by other AR-to-diffusion conversions ("A2D").
const DefaultMaskToken = "<|mask|>"

// AttentionBlock is block-causal attention: bidirectional inside a block,
// causal across blocks, as Fast-dLLM v2 trains and decodes. It is the only
// pattern the sampler implements; the field exists so that another one can
// be added without a format change.
const AttentionBlock = "block"

// Settings is the content of dllm.json: how the weights beside it are to be
// run as a diffusion model.
type Settings struct {
	// FormatVersion is FormatVersion when written by this package.
	FormatVersion int `json:"format_version"`
	// MaskTokenID is the id fed at positions still to be denoised.
	MaskTokenID int `json:"mask_token_id"`
	// MaskToken is the mask token's spelling in the tokenizer.
	MaskToken string `json:"mask_token"`
	// BlockSize is the number of tokens denoised together.
	BlockSize int `json:"block_size"`
	// Attention is the attention pattern; AttentionBlock.
	Attention string `json:"attention"`
	// Shift means the prediction for position p is read from the logits at
	// p-1, as the AR model was trained to predict; converted AR models keep
	// it (Fast-dLLM v2), so little has to be relearned.
	Shift bool `json:"shift"`
	// Source records what the model was converted from.
	Source Source `json:"source"`
	// WeightsSHA256 maps the name of each weights file in the model
	// directory (model.safetensors, or every shard) to the hex sha256 of its
	// bytes as written, so that a copy damaged since (a bit flip on disk or
	// in transfer) is caught before it is served (model.VerifyWeights).
	// Absent when the writer did not hash the weights (convert --hash=fast)
	// and in directories written before it existed. An older dllm rejects
	// the key as unknown rather than misreading it, so FormatVersion stays 1.
	WeightsSHA256 map[string]string `json:"weights_sha256,omitempty"`
	// CreatedBy is "dllm <version>".
	CreatedBy string `json:"created_by"`
	// CreatedAt is when the model directory was written.
	CreatedAt time.Time `json:"created_at"`
	// Generation holds the sampler's defaults; requests may override them.
	Generation Generation `json:"generation"`
}

// Source identifies the checkpoint a model was converted from.
type Source struct {
	// Path is the absolute path of the source directory at conversion time.
	Path string `json:"path"`
	// SHA256 is the hex sha256 of the safetensors file, or for a sharded
	// checkpoint the sha256 of `sha256sum` output over its shards in name
	// order. Empty when only a Fingerprint was computed.
	SHA256 string `json:"sha256,omitempty"`
	// Fingerprint is a cheap stand-in for SHA256 (--hash=fast): the hex
	// sha256 of every shard's name, size and header, which changes when any
	// tensor is added, reshaped or moved but not when values change in place.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Architecture is the source config's architectures[0].
	Architecture string `json:"architecture"`
}

// Generation holds the sampler's defaults.
type Generation struct {
	// Threshold is the confidence above which a masked position is committed
	// in a denoising step (the most confident one always is).
	Threshold float64 `json:"threshold"`
	// MaxStepsPerBlock bounds the denoising steps of one block; BlockSize
	// steps always suffice since every step commits at least one token.
	MaxStepsPerBlock int `json:"max_steps_per_block"`
	// Temperature 0 means greedy.
	Temperature float64 `json:"temperature"`
	// TopP is nucleus sampling's mass; 1 disables it.
	TopP float64 `json:"top_p"`
	// Verify checks every drafted block against the model's own greedy
	// left-to-right prediction (Options.Verify) in greedy requests that do
	// not say otherwise; sampled requests run without it. Needs the shift.
	Verify bool `json:"verify,omitempty"`
}

// DefaultGeneration returns the sampler defaults for a block size: a 0.9
// threshold (Fast-dLLM's choice between speed and quality), greedy, and
// verify decoding where the model has the shift: on the proxy (docs/
// proxy.md) it kept the AR model's scores at four tokens per forward where
// the threshold alone lost a third of them.
func DefaultGeneration(blockSize int, shift bool) Generation {
	return Generation{Threshold: 0.9, MaxStepsPerBlock: blockSize, Temperature: 0, TopP: 1, Verify: shift}
}

// NewSettings is the one constructor of dllm.json's content: the current
// format, block attention, and DefaultGeneration for the block size;
// callers override what they were told otherwise.
func NewSettings(maskID int, maskToken string, blockSize int, shift bool) *Settings {
	return &Settings{FormatVersion: FormatVersion, MaskTokenID: maskID, MaskToken: maskToken, BlockSize: blockSize,
		Attention: AttentionBlock, Shift: shift, Generation: DefaultGeneration(blockSize, shift)}
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks the settings on their own and against the model's
// embedding rows (vocabSize), so a sampler never feeds an id the model lacks.
func (s *Settings) Validate(vocabSize int) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("diffusion: %s: "+format, append([]any{SettingsFile}, args...)...)
	}
	g := s.Generation
	switch {
	case s.FormatVersion != FormatVersion:
		return fail("format_version %d is not supported (this dllm reads %d)", s.FormatVersion, FormatVersion)
	case s.MaskTokenID < 0:
		return fail("mask_token_id %d is negative", s.MaskTokenID)
	case vocabSize > 0 && s.MaskTokenID >= vocabSize:
		return fail("mask_token_id %d is outside the model's %d embedding rows", s.MaskTokenID, vocabSize)
	case s.MaskToken == "":
		return fail("mask_token is empty")
	case s.BlockSize < 1:
		return fail("block_size %d must be at least 1", s.BlockSize)
	case s.Attention != AttentionBlock:
		return fail("attention %q is not supported (want %q)", s.Attention, AttentionBlock)
	case s.Source.SHA256 != "" && !hexSHA256.MatchString(s.Source.SHA256):
		return fail("source.sha256 %q is not 64 lowercase hex digits", s.Source.SHA256)
	case s.Source.Fingerprint != "" && !hexSHA256.MatchString(s.Source.Fingerprint):
		return fail("source.fingerprint %q is not 64 lowercase hex digits", s.Source.Fingerprint)
	case g.MaxStepsPerBlock < 1:
		return fail("generation.max_steps_per_block %d must be at least 1", g.MaxStepsPerBlock)
	case g.Verify && !s.Shift:
		return fail("generation.verify needs shift: without it no logit row is a next-token prediction")
	}
	for _, err := range []error{CheckThreshold(g.Threshold), CheckTemperature(g.Temperature), CheckTopP(g.TopP), checkWeightSums(s.WeightsSHA256)} {
		if err != nil {
			return fail("%v", err)
		}
	}
	return nil
}

// checkWeightSums checks weights_sha256: its keys must name files of the
// model directory itself, so a sum can never point a verifier elsewhere.
// Names are visited in order so the error is the same on every run.
func checkWeightSums(sums map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(sums)) {
		switch {
		case strings.ContainsAny(name, `/\`) || !strings.HasSuffix(name, ".safetensors") || name == ".safetensors":
			return fmt.Errorf("weights_sha256 key %q is not a .safetensors file name in the model directory", name)
		case !hexSHA256.MatchString(sums[name]):
			return fmt.Errorf("weights_sha256[%q] %q is not 64 lowercase hex digits", name, sums[name])
		}
	}
	return nil
}

// LoadSettings reads and validates dir/dllm.json. Unknown keys are errors:
// a misspelt key silently ignored would run the model with a default the
// user did not choose. The model's vocabulary is not known here; callers
// that have it also call Validate with it.
func LoadSettings(dir string) (*Settings, error) {
	path := filepath.Join(dir, SettingsFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("diffusion: %s: no %s: not a dllm model directory (make one with dllm convert)", dir, SettingsFile)
	}
	if err != nil {
		return nil, fmt.Errorf("diffusion: %w", err)
	}
	// The version is checked before the strict decode so that a file from a
	// newer dllm says so, rather than failing on a field added since.
	var v struct {
		FormatVersion *int `json:"format_version"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("diffusion: %s: bad JSON: %w", path, err)
	}
	if v.FormatVersion == nil {
		return nil, fmt.Errorf("diffusion: %s: no format_version", path)
	}
	if *v.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("diffusion: %s: format_version %d is not supported (this dllm reads %d)", path, *v.FormatVersion, FormatVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Settings
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("diffusion: %s: %w", path, err)
	}
	if err := s.Validate(0); err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	return &s, nil
}

// Save writes dir/dllm.json through a temporary file and a rename, so a
// reader never sees half a file.
func (s *Settings) Save(dir string) error {
	if err := s.Validate(0); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "<|mask|>", not "\u003c|mask|\u003e"
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("diffusion: %w", err)
	}
	data := buf.Bytes()
	f, err := os.CreateTemp(dir, SettingsFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("diffusion: saving settings: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644) // CreateTemp makes 0600
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, SettingsFile))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("diffusion: saving settings: %w", err)
	}
	return nil
}
