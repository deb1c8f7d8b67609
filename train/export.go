package train

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"dllm/diffusion"
	"dllm/model"
	"dllm/tokenizer"
)

// TrainInfoFile is the name of the training record written beside
// dllm.json in an exported model directory.
const TrainInfoFile = "train.json"

// TrainInfo records how an exported model was trained.
type TrainInfo struct {
	Objective  string `json:"objective"`
	BlockSize  int    `json:"block_size"`
	Shift      bool   `json:"shift"`
	Steps      int    `json:"steps"`
	TokensSeen int64  `json:"tokens_seen"`
	// ConfigHash is Config.Hash of the training config below.
	ConfigHash string `json:"config_hash"`
	Config     Config `json:"config"`
	// Checkpoint is the absolute path of the checkpoint exported.
	Checkpoint  string    `json:"checkpoint"`
	SourceModel string    `json:"source_model"`
	CreatedBy   string    `json:"created_by"`
	CreatedAt   time.Time `json:"created_at"`
}

// ExportOptions configure Export.
type ExportOptions struct {
	// DType of the exported weights: "" or "auto" (the training config's
	// export_dtype, whose auto is config.json's dtype), "bf16", "f16", "f32".
	DType string
	// Tokenizer is the directory whose tokenizer and other non-weight files
	// are copied; default the model directory training started from.
	Tokenizer string
	// CreatedBy is recorded in dllm.json and train.json.
	CreatedBy string
}

// Export writes a servable model directory out from a checkpoint: config.json,
// model.safetensors in the model's dtype, the tokenizer files of the source
// model, dllm.json with the trained block size and shift and the weights'
// sha256, and train.json.
// The checkpoint is verified first; out must not exist. Everything is
// written to a temporary directory beside out and renamed into place, so
// a failed export leaves nothing behind. No libtorch is needed.
func Export(checkpoint, out string, o ExportOptions) (err error) {
	st, err := VerifyCheckpoint(checkpoint)
	if err != nil {
		return err
	}
	if fileExists(out) {
		return fmt.Errorf("export: %s exists; choose another --out (nothing is overwritten)", out)
	}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(checkpoint, name))
		if err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
		return b, nil
	}
	// 1. What the checkpoint says about itself.
	cfgYAML, err := read(trainConfigName)
	if err != nil {
		return err
	}
	cfg := DefaultConfig()
	if err := cfg.parse(cfgYAML); err != nil {
		return fmt.Errorf("export: %s: %w", trainConfigName, err)
	}
	rawSettings, err := read(settingsName)
	if err != nil {
		return err
	}
	var s diffusion.Settings
	if err := jsonUnmarshal(rawSettings, &s); err != nil {
		return fmt.Errorf("export: %s: %w", settingsName, err)
	}
	modelConfig, err := read(modelConfigName)
	if err != nil {
		return err
	}
	mcfg, err := model.ParseConfig(modelConfig)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	dt, dtName, err := exportDType(o.DType, cfg.ExportDType, mcfg.DType)
	if err != nil {
		return err
	}
	tokDir := o.Tokenizer
	if tokDir == "" {
		tokDir = st.SourceModel
	}
	if tokDir != "" && !fileExists(tokDir) {
		return fmt.Errorf("export: the source model directory %s (for the tokenizer files) is gone; pass --tokenizer DIR", tokDir)
	}
	// 2. The directory, written beside its final name.
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(out)), 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(out)), filepath.Base(out)+".tmp-")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes 0700; model directories are shared as HF's are
		return fmt.Errorf("export: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	// 3. Weights, converted tensor by tensor and hashed as they are written.
	sum, err := convertWeights(filepath.Join(checkpoint, modelWeights), filepath.Join(tmp, modelWeights), dt)
	if err != nil {
		return err
	}
	// 4. config.json with the dtype written.
	if modelConfig, err = setConfigDType(modelConfig, dtName); err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(tmp, modelConfigName), modelConfig); err != nil {
		return err
	}
	// 5. Tokenizer and the other small files of the source model.
	if tokDir != "" {
		if err := copySmallFiles(tokDir, tmp); err != nil {
			return err
		}
	}
	// 6. dllm.json: the block size the model was last trained with.
	if cfg.Objective != ObjectiveAR {
		if st.BlockSize > 0 && cfg.Objective == ObjectiveBlock {
			s.BlockSize = st.BlockSize
		}
		s.Shift = cfg.Shift
		s.Generation.MaxStepsPerBlock = s.BlockSize
	}
	// The checkpoint's settings may carry the sums of the weights training
	// started from; these are the sums of the file just written.
	s.WeightsSHA256 = map[string]string{modelWeights: sum}
	s.CreatedBy, s.CreatedAt = o.CreatedBy, time.Now().UTC().Truncate(time.Second)
	if s.CreatedBy == "" {
		s.CreatedBy = "dllm"
	}
	if err := s.Validate(mcfg.VocabSize); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	// The mask token, as transformers reads it (mask_token_id), where the
	// model is a diffusion model and its tokenizer was copied.
	if tokDir != "" && cfg.Objective != ObjectiveAR {
		if err := tokenizer.SetMaskToken(tmp, s.MaskToken, s.MaskTokenID); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	if err := s.Save(tmp); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	abs, _ := filepath.Abs(checkpoint)
	info := TrainInfo{Objective: cfg.Objective, BlockSize: s.BlockSize, Shift: s.Shift, Steps: st.Step, TokensSeen: st.TokensSeen,
		ConfigHash: cfg.Hash(), Config: cfg, Checkpoint: abs, SourceModel: st.SourceModel, CreatedBy: s.CreatedBy, CreatedAt: s.CreatedAt}
	b, _ := jsonMarshal(info)
	if err := writeFileSync(filepath.Join(tmp, TrainInfoFile), b); err != nil {
		return err
	}
	// 7. Into place.
	if err := syncDir(tmp); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return syncDir(filepath.Dir(filepath.Clean(out)))
}

// exportDType resolves the exported dtype: the flag, else the training
// config's export_dtype, whose "auto" is config.json's declared dtype
// (float32 when it declares none).
func exportDType(flag, configured, declared string) (model.DType, string, error) {
	s := flag
	if s == "" || s == "auto" {
		s = configured
	}
	if s == "" || s == "auto" {
		s = declared
	}
	switch s {
	case "bf16", "bfloat16":
		return model.BF16, "bfloat16", nil
	case "f16", "float16":
		return model.F16, "float16", nil
	case "f32", "float32", "":
		return model.F32, "float32", nil
	}
	return 0, "", fmt.Errorf("export: dtype %q: want auto, bf16, f16 or f32", s)
}

// convertWeights rewrites a float32 safetensors file in dtype dt and
// returns the hex sha256 of the file written.
func convertWeights(src, dst string, dt model.DType) (string, error) {
	sf, err := model.OpenSafetensors(src)
	if err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	defer sf.Close()
	var ts []model.TensorData
	for _, info := range sf.Tensors() {
		if info.DType != model.F32 {
			return "", fmt.Errorf("export: %s: tensor %s is %s, want F32", src, info.Name, info.DType)
		}
		ts = append(ts, model.TensorData{Name: info.Name, DType: dt, Shape: info.Shape, Stream: func(w io.Writer) error {
			b, err := sf.Bytes(info.Name)
			if err != nil {
				return err
			}
			return writeConverted(w, b, dt)
		}})
	}
	sum, err := model.WriteSafetensorsSHA256(dst, ts, map[string]string{"format": "pt"})
	if err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	return sum, nil
}

// writeConverted writes little-endian float32 data as dt, in pieces.
func writeConverted(w io.Writer, f32 []byte, dt model.DType) error {
	if dt == model.F32 {
		_, err := w.Write(f32)
		return err
	}
	const piece = 1 << 16
	buf := make([]byte, 0, 2*piece)
	for off := 0; off < len(f32); off += 4 * piece {
		end := min(off+4*piece, len(f32))
		buf = buf[:0]
		for i := off; i < end; i += 4 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(f32[i:]))
			var h uint16
			if dt == model.BF16 {
				h = model.Float32ToBF16(v)
			} else {
				h = model.Float32ToF16(v)
			}
			buf = binary.LittleEndian.AppendUint16(buf, h)
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// setConfigDType makes config.json declare dtype name (in "torch_dtype" and
// "dtype", whichever it has; "torch_dtype" when neither), leaving the file
// untouched when it already does.
func setConfigDType(raw []byte, name string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("export: config.json: %w", err)
	}
	want, _ := json.Marshal(name)
	changed := false
	keys := []string{"torch_dtype", "dtype"}
	present := false
	for _, k := range keys {
		if v, ok := m[k]; ok {
			present = true
			if !bytes.Equal(bytes.TrimSpace(v), want) {
				m[k], changed = want, true
			}
		}
	}
	if !present {
		m["torch_dtype"], changed = want, true
	}
	if !changed {
		return raw, nil
	}
	return jsonMarshal(m)
}

// copySmallFiles copies the regular files of src that are not weights or
// dllm's own records (the tokenizer, chat template, generation config,
// licence, ...) into dst.
func copySmallFiles(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || skipOnExport(n) {
			continue
		}
		// Stat follows links: HF snapshot directories are links into blobs.
		if fi, err := os.Stat(filepath.Join(src, n)); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(src, n), filepath.Join(dst, n)); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	return nil
}

func skipOnExport(name string) bool {
	switch name {
	case modelConfigName, diffusion.SettingsFile, TrainInfoFile, "model.safetensors.index.json", "pytorch_model.bin.index.json":
		return true
	}
	for _, ext := range []string{".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// jsonMarshal is indented JSON without HTML escaping ("<|mask|>" stays
// readable), with a final newline.
func jsonMarshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// jsonUnmarshal decodes strictly: unknown fields are errors.
func jsonUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// DirHint says what dir is when it is a training output or checkpoint
// rather than a model directory, with what to run instead: for commands
// that take a model directory (serve, generate, inspect) and would
// otherwise fail on a missing file. "" when it is neither.
func DirHint(dir string) string {
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	if exists(stateName) && exists(optimizerName) {
		return fmt.Sprintf("%s is a training checkpoint, not a model directory: make one with dllm export --checkpoint %s --out MODEL_DIR", dir, dir)
	}
	exports, _ := filepath.Glob(filepath.Join(dir, "model-step-*")) // the loop's exports: "model-" + a checkpoint's name
	if len(exports) > 0 {
		slices.Sort(exports)
		return fmt.Sprintf("%s is a training output directory, not a model directory: its newest export is %s", dir, exports[len(exports)-1])
	}
	if exists(checkpointsDir) {
		return fmt.Sprintf("%s is a training output directory with no exported model: make one with dllm export --checkpoint %s --out MODEL_DIR", dir, dir)
	}
	return ""
}
