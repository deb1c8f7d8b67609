package train

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"dllm/model"
	"dllm/torch"
)

// A checkpoint is a directory out/checkpoints/step-NNNNNNN/ holding
//
//	config.json          the model's HF config (so model.Load reads the dir)
//	model.safetensors    the float32 master weights, HF names
//	optimizer.safetensors AdamW moments: "m.<name>", "v.<name>" (float32)
//	state.json           State: step, tokens, data position, RNG, ...
//	train.yaml           the resolved training config
//	settings.json        the diffusion settings (dllm.json) trained under
//	manifest.json        the sha256 of every file above
//
// It is written to a temporary directory beside its final name, every file
// fsynced, and renamed into place; a checkpoint whose files do not match
// its manifest is refused.
const (
	checkpointsDir   = "checkpoints"
	manifestName     = "manifest.json"
	stateName        = "state.json"
	modelWeights     = "model.safetensors"
	optimizerName    = "optimizer.safetensors"
	trainConfigName  = "train.yaml"
	settingsName     = "settings.json"
	modelConfigName  = "config.json"
	checkpointFormat = "dllm-checkpoint"
)

// stepDir matches a finished checkpoint's directory name.
var stepDir = regexp.MustCompile(`^step-(\d{7,})$`)

// checkpointName is the directory name of the checkpoint after step steps.
func checkpointName(step int) string { return fmt.Sprintf("step-%07d", step) }

// State is the trainer's progress, saved in every checkpoint: with the
// weights and moments it is all a resumed run needs to continue exactly.
type State struct {
	// Step is the number of optimizer steps taken.
	Step int `json:"step"`
	// TokensSeen counts data tokens trained on (sequences x length).
	TokensSeen int64 `json:"tokens_seen"`
	// DataPosition is the number of training sequences consumed.
	DataPosition int64 `json:"data_position"`
	// RNG is the noise generator's state (math/rand/v2 PCG, binary).
	RNG []byte `json:"rng"`
	// AdamSteps are the AdamW step counters (decayed group, the rest).
	AdamSteps [2]int64 `json:"adam_steps"`
	// BlockSize is the block size of the last step taken.
	BlockSize int `json:"block_size"`
	// ConfigHash identifies the training config (Config.Hash).
	ConfigHash string `json:"config_hash"`
	// Loss is the training loss of the last step.
	Loss float64 `json:"loss"`
	// SourceModel is the model directory training started from.
	SourceModel string `json:"source_model"`
	// Saved is when the checkpoint was written.
	Saved time.Time `json:"saved"`
}

// checkpointManifest lists a checkpoint's files with their sha256.
type checkpointManifest struct {
	Format string            `json:"format"`
	Step   int               `json:"step"`
	Files  map[string]string `json:"files"`
}

// checkpointFiles are what saveCheckpoint writes besides the tensors.
type checkpointFiles struct {
	state       *State
	config      []byte // train.yaml
	settings    []byte // settings.json
	modelConfig []byte // config.json
}

// saveCheckpoint writes the checkpoint of st.Step under root (the
// checkpoints directory) and keeps the newest keep checkpoints. An existing
// directory of the same step (left by a run that was not resumed from it)
// is moved aside, never overwritten.
func saveCheckpoint(root string, params []namedParam, opts [2]*torch.AdamW, f checkpointFiles, keep int) (dir string, err error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	name := checkpointName(f.state.Step)
	tmp, err := os.MkdirTemp(root, name+".tmp-")
	if err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	// 1. Tensors, streamed one at a time to the file.
	if err := writeTensors(filepath.Join(tmp, modelWeights), modelTensors(params)); err != nil {
		return "", err
	}
	if err := writeTensors(filepath.Join(tmp, optimizerName), momentTensors(params, opts)); err != nil {
		return "", err
	}
	// 2. The small files.
	stateJSON, _ := json.MarshalIndent(f.state, "", "  ")
	for _, s := range []struct {
		name string
		data []byte
	}{{stateName, append(stateJSON, '\n')}, {trainConfigName, f.config}, {settingsName, f.settings}, {modelConfigName, f.modelConfig}} {
		if err := writeFileSync(filepath.Join(tmp, s.name), s.data); err != nil {
			return "", err
		}
	}
	// 3. The manifest, hashed from the files as written.
	man := checkpointManifest{Format: checkpointFormat, Step: f.state.Step, Files: map[string]string{}}
	names := []string{modelWeights, optimizerName, stateName, trainConfigName, settingsName, modelConfigName}
	sums, err := hashFiles(tmp, names)
	if err != nil {
		return "", err
	}
	for i, n := range names {
		man.Files[n] = sums[i]
	}
	manJSON, _ := json.MarshalIndent(man, "", "  ")
	if err := writeFileSync(filepath.Join(tmp, manifestName), append(manJSON, '\n')); err != nil {
		return "", err
	}
	if err := syncDir(tmp); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	// 4. Into place.
	dir = filepath.Join(root, name)
	if _, err := os.Stat(dir); err == nil {
		aside := fmt.Sprintf("%s.old-%d", dir, time.Now().Unix())
		if err := os.Rename(dir, aside); err != nil {
			return "", fmt.Errorf("train: checkpoint: moving the existing %s aside: %w", dir, err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	if err := syncDir(root); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	return dir, pruneCheckpoints(root, keep)
}

// modelTensors describes the master weights for WriteSafetensors, each
// copied to the host only while it is written.
func modelTensors(params []namedParam) []model.TensorData {
	var ts []model.TensorData
	for _, p := range params {
		ts = append(ts, streamTensor(p.name, p.t))
	}
	return ts
}

// momentTensors describes both AdamW instances' moments by parameter name.
func momentTensors(params []namedParam, opts [2]*torch.AdamW) []model.TensorData {
	byTensor := map[*torch.Tensor]string{}
	for _, p := range params {
		byTensor[p.t] = p.name
	}
	var ts []model.TensorData
	for _, o := range opts {
		for i, p := range o.Params {
			ts = append(ts, streamTensor("m."+byTensor[p], o.M[i]), streamTensor("v."+byTensor[p], o.V[i]))
		}
	}
	return ts
}

func streamTensor(name string, t *torch.Tensor) model.TensorData {
	return model.TensorData{Name: name, DType: model.F32, Shape: t.Shape(), Stream: func(w io.Writer) (err error) {
		defer torch.Recover(&err)
		_, err = w.Write(t.Bytes(torch.Float32))
		return err
	}}
}

// failWrite, when set (tests), is consulted before each checkpoint file is
// written; its error stands for the write's, as a full disk would.
var failWrite func(path string) error

func writeTensors(path string, ts []model.TensorData) error {
	if failWrite != nil {
		if err := failWrite(path); err != nil {
			return fmt.Errorf("train: checkpoint: %w", err)
		}
	}
	if err := model.WriteSafetensors(path, ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	return nil
}

// writeFileSync writes data to path and fsyncs it.
func writeFileSync(path string, data []byte) error {
	if failWrite != nil {
		if err := failWrite(path); err != nil {
			return fmt.Errorf("train: writing %s: %w", path, err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("train: writing %s: %w", path, err)
	}
	return nil
}

// syncDir makes renames in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// hashFiles computes the hex sha256 of each named file in dir, in parallel.
func hashFiles(dir string, names []string) ([]string, error) {
	sums := make([]string, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(filepath.Join(dir, n))
			if err != nil {
				errs[i] = err
				return
			}
			defer f.Close()
			h := sha256.New()
			if _, err := io.Copy(h, f); err != nil {
				errs[i] = err
				return
			}
			sums[i] = hex.EncodeToString(h.Sum(nil))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("train: checkpoint: %w", err)
	}
	return sums, nil
}

// VerifyCheckpoint checks that dir is a complete checkpoint whose files all
// match the sha256 its manifest records, and returns its state.
func VerifyCheckpoint(dir string) (*State, error) {
	fail := func(format string, args ...any) (*State, error) {
		return nil, fmt.Errorf("train: checkpoint %s: "+format, append([]any{dir}, args...)...)
	}
	raw, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return fail("no readable %s (an incomplete or foreign directory): %v", manifestName, err)
	}
	var man checkpointManifest
	if err := json.Unmarshal(raw, &man); err != nil || man.Format != checkpointFormat {
		return fail("%s is not a dllm checkpoint manifest", manifestName)
	}
	var names []string
	for n := range man.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range []string{modelWeights, optimizerName, stateName, trainConfigName, settingsName, modelConfigName} {
		if _, ok := man.Files[n]; !ok {
			return fail("the manifest does not list %s", n)
		}
	}
	sums, err := hashFiles(dir, names)
	if err != nil {
		return fail("%v", err)
	}
	for i, n := range names {
		if sums[i] != man.Files[n] {
			return fail("%s is corrupt: sha256 %s, the manifest records %s", n, sums[i], man.Files[n])
		}
	}
	var st State
	raw, err = os.ReadFile(filepath.Join(dir, stateName))
	if err == nil {
		err = json.Unmarshal(raw, &st)
	}
	if err != nil {
		return fail("%s: %v", stateName, err)
	}
	if st.Step != man.Step {
		return fail("state step %d differs from the manifest's %d", st.Step, man.Step)
	}
	return &st, nil
}

// listCheckpoints returns the finished checkpoint directories under root,
// newest (highest step) first.
func listCheckpoints(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	type cp struct {
		step int
		dir  string
	}
	var cps []cp
	for _, e := range entries {
		m := stepDir.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		cps = append(cps, cp{n, filepath.Join(root, e.Name())})
	}
	slices.SortFunc(cps, func(a, b cp) int { return b.step - a.step })
	var dirs []string
	for _, c := range cps {
		dirs = append(dirs, c.dir)
	}
	return dirs, nil
}

// LatestCheckpoint finds the newest valid checkpoint under root. Newer ones
// that fail verification are reported through warn and renamed to
// NAME.corrupt-<unix time> (kept, never deleted), so that the run resumed
// from an older one does not later collide with them. It returns "" when
// there is no valid checkpoint.
func LatestCheckpoint(root string, warn func(string)) (string, *State, error) {
	dirs, err := listCheckpoints(root)
	if err != nil {
		return "", nil, err
	}
	for _, d := range dirs {
		st, verr := VerifyCheckpoint(d)
		if verr == nil {
			return d, st, nil
		}
		aside := fmt.Sprintf("%s.corrupt-%d", d, time.Now().Unix())
		if err := os.Rename(d, aside); err != nil {
			return "", nil, fmt.Errorf("%w; moving it aside failed: %v", verr, err)
		}
		if warn != nil {
			warn(fmt.Sprintf("%v; refused and moved to %s", verr, filepath.Base(aside)))
		}
	}
	return "", nil, nil
}

// pruneCheckpoints removes all but the newest keep finished checkpoints.
func pruneCheckpoints(root string, keep int) error {
	dirs, err := listCheckpoints(root)
	if err != nil {
		return err
	}
	for i := keep; i < len(dirs); i++ {
		if err := os.RemoveAll(dirs[i]); err != nil {
			return fmt.Errorf("train: removing old checkpoint: %w", err)
		}
	}
	return nil
}

// removeStaleTemps deletes the temporary directories of checkpoints whose
// writing was interrupted: they never have a manifest in a final place and
// are never read.
func removeStaleTemps(root string) {
	matches, _ := filepath.Glob(filepath.Join(root, "step-*.tmp-*"))
	for _, m := range matches {
		os.RemoveAll(m)
	}
}

// restoreMoments loads dir's AdamW moments into opts, matched to params by
// name (bit-exact: float32 bytes copied in place). The master weights come
// from model.Load on the checkpoint directory itself.
func restoreMoments(dir string, params []namedParam, opts [2]*torch.AdamW) (err error) {
	defer torch.Recover(&err)
	byTensor := map[*torch.Tensor]string{}
	for _, p := range params {
		byTensor[p.t] = p.name
	}
	want := map[string]*torch.Tensor{}
	for _, o := range opts {
		for i, p := range o.Params {
			want["m."+byTensor[p]] = o.M[i]
			want["v."+byTensor[p]] = o.V[i]
		}
	}
	sf, err := model.OpenSafetensors(filepath.Join(dir, optimizerName))
	if err != nil {
		return err
	}
	defer sf.Close()
	if len(sf.Tensors()) != len(want) {
		return fmt.Errorf("train: checkpoint %s: %s holds %d tensors, the optimizer has %d", dir, optimizerName, len(sf.Tensors()), len(want))
	}
	for name, dst := range want {
		info, ok := sf.Tensor(name)
		if !ok || info.DType != model.F32 || !slices.Equal(info.Shape, dst.Shape()) {
			return fmt.Errorf("train: checkpoint %s: %s: tensor %s missing or not float32 %v", dir, optimizerName, name, dst.Shape())
		}
		b, err := sf.Bytes(name)
		if err != nil {
			return err
		}
		src := torch.FromBytes(b, torch.Float32, info.Shape, torch.CPU)
		torch.NoGrad(func() { dst.CopyFrom(src) })
		src.Free()
	}
	return nil
}
