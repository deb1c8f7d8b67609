package train

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Objectives.
const (
	// ObjectiveBlock is block diffusion in the noisy+clean layout.
	ObjectiveBlock = "block"
	// ObjectiveAR is causal next-token prediction on the clean sequence.
	ObjectiveAR = "ar"
	// ObjectiveMDM is full-sequence masked diffusion.
	ObjectiveMDM = "mdm"
)

// Weight initialisations.
const (
	// InitPretrained loads the weights of the model directory.
	InitPretrained = "pretrained"
	// InitRandom draws weights of the configured shape (speed and memory
	// runs without a checkpoint).
	InitRandom = "random"
)

// LR schedules.
const (
	ScheduleCosine   = "cosine"   // warm-up, then cosine decay to min_lr
	ScheduleWSD      = "wsd"      // warm-up, stable, linear decay over the last decay_frac
	ScheduleConstant = "constant" // warm-up, then constant
)

// Synthetic as data.train draws random token sequences instead of reading
// shards (speed runs that need no corpus).
const Synthetic = "synthetic"

// BlockStage is one piece of the block-size schedule: from optimizer step
// Step (0-based) on, blocks have Size tokens.
type BlockStage struct {
	Step int `yaml:"step" json:"step"`
	Size int `yaml:"size" json:"size"`
}

// DataConfig says where sequences come from. In YAML it is a mapping, or
// the bare scalar "synthetic" (`data: synthetic`).
type DataConfig struct {
	// Train is a directory written by `dllm data prepare` (manifest.json and
	// shards) or "synthetic". Required.
	Train string `yaml:"train" json:"train"`
	// Eval is a held-out data directory for the periodic eval loss; "" (the
	// default) evaluates on nothing.
	Eval string `yaml:"eval" json:"eval"`
	// HoldOut reserves the last N sequences of the training data for the
	// eval loss (never trained on) when eval is not set. Default 0.
	HoldOut int `yaml:"hold_out" json:"hold_out"`
	// Shuffle visits the training sequences in a new random order every
	// epoch (from seed). Default true.
	Shuffle bool `yaml:"shuffle" json:"shuffle"`
	// AllowIncomplete trains on the good shards of a data directory whose
	// preparation has not finished (interrupted or still running) or whose
	// shards are missing, truncated or damaged, with a warning; otherwise
	// such a directory is refused, so that no run trains on part of its
	// data by accident. Applies to data.eval too. Default false.
	AllowIncomplete bool `yaml:"allow_incomplete" json:"allow_incomplete"`
}

// UnmarshalYAML accepts `data: synthetic` as well as the mapping, and keeps
// unknown keys errors inside the mapping (yaml.v3 does not pass KnownFields
// on to custom unmarshalers).
func (d *DataConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		if s != Synthetic {
			return fmt.Errorf("line %d: data: %q: want %q or a mapping with train/eval/hold_out/shuffle/allow_incomplete", n.Line, s, Synthetic)
		}
		d.Train = Synthetic
		return nil
	}
	if err := checkKeys(n, reflect.TypeOf(*d)); err != nil {
		return err
	}
	type plain DataConfig
	return n.Decode((*plain)(d))
}

// DistillConfig is the optional distillation term (docs/training.md): a
// frozen teacher reads each clean sequence causally, as an AR model reads
// text, and its next-token distributions are soft targets for the masked
// positions.
type DistillConfig struct {
	// Teacher is the teacher's model directory; "" (default) is the run's
	// starting model (model), which for a run on `dllm convert`'s output
	// holds the AR original's weights. Its vocab_size must be the
	// student's.
	Teacher string `yaml:"teacher" json:"teacher"`
	// Weight multiplies the term; 0 (default) turns distillation off and
	// loads no teacher.
	Weight float64 `yaml:"weight" json:"weight"`
	// Temperature T divides both models' logits; the term is scaled by
	// T^2 so that its gradients keep their size as T changes. Default 1.
	Temperature float64 `yaml:"temperature" json:"temperature"`
}

// checkKeys reports a mapping key that is no yaml tag of t.
func checkKeys(n *yaml.Node, t reflect.Type) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	known := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		known[strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]] = true
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !known[k.Value] {
			return fmt.Errorf("line %d: field %s not found in type %s", k.Line, k.Value, t)
		}
	}
	return nil
}

// Config is everything one training run needs. DefaultConfig gives the
// defaults noted on each field; a YAML file (Load) overrides them and flags
// override the file.
type Config struct {
	// Model is the model directory to start from: `dllm convert`'s output
	// (config.json, weights, tokenizer, dllm.json). Required; with init:
	// random only its config.json (or model_config) and dllm.json are read,
	// and neither must exist when model_config and mask_token_id are given.
	Model string `yaml:"model" json:"model"`
	// Init is "pretrained" (default) or "random".
	Init string `yaml:"init" json:"init"`
	// ModelConfig is the config.json that fixes the shape for init: random;
	// default: Model's.
	ModelConfig string `yaml:"model_config" json:"model_config"`
	// MaskTokenID is the id fed at masked positions; -1 (default) takes
	// dllm.json's, or vocab_size-1 with init: random and no dllm.json.
	MaskTokenID int `yaml:"mask_token_id" json:"mask_token_id"`
	// Data are the training and eval sequences.
	Data DataConfig `yaml:"data" json:"data"`
	// Out receives metrics.jsonl, checkpoints/ and the exported model.
	// Default "out/train".
	Out string `yaml:"out" json:"out"`

	// Objective is "block" (default), "ar" or "mdm".
	Objective string `yaml:"objective" json:"objective"`
	// SeqLen crops the data's sequences to this many tokens; 0 (default)
	// uses them whole. Synthetic data needs it.
	SeqLen int `yaml:"seq_len" json:"seq_len"`
	// BlockSchedule is the block size by optimizer step, piecewise constant
	// (LLaDA 2.0's warm-up: small blocks first). The first stage must start
	// at step 0. Default [{step: 0, size: 32}].
	BlockSchedule []BlockStage `yaml:"block_schedule" json:"block_schedule"`
	// Shift reads the prediction of token i from the logits of position i-1
	// (the AR habit the sampler relies on). Default true.
	Shift bool `yaml:"shift" json:"shift"`
	// Complementary puts every sequence in the batch twice, with mask m and
	// its complement, so every token is a target once. Default true.
	Complementary bool `yaml:"complementary" json:"complementary"`
	// TMin is the lowest noise level: t ~ U(t_min, 1). Default 0.
	TMin float64 `yaml:"t_min" json:"t_min"`
	// TFloor caps the loss weight 1/t at 1/t_floor. Default 0.1.
	TFloor float64 `yaml:"t_floor" json:"t_floor"`
	// ARLossWeight adds this times the AR loss of the clean copy (block
	// objective only; I-DLM). Default 0.
	ARLossWeight float64 `yaml:"ar_loss_weight" json:"ar_loss_weight"`
	// ConfidenceLossWeight adds this times the entropy of the prediction at
	// every diffusion target the model already predicts right (argmax =
	// target), over the step's targets: LLaDA2.0's confidence-aware
	// parallel (CAP) loss, which sharpens correct predictions so that more
	// of them pass a threshold in one step. Not at the clean copy's AR
	// targets. Default 0.
	ConfidenceLossWeight float64 `yaml:"confidence_loss_weight" json:"confidence_loss_weight"`
	// AnnealSteps (mdm only) anneals attention from causal to bidirectional:
	// mask = causal OR (u < p), p rising linearly from 0 to 1 over these
	// steps (DiffuLLaMA). 0 (default): bidirectional from the start.
	AnnealSteps int `yaml:"anneal_steps" json:"anneal_steps"`
	// Distill adds weight x the mean KL(teacher || student) over the
	// masked targets. Default off.
	Distill DistillConfig `yaml:"distill" json:"distill"`

	// Steps is the number of optimizer steps. Required.
	Steps int `yaml:"steps" json:"steps"`
	// MicroBatch is the sequences per forward (doubled in the batch when
	// complementary). Default 1.
	MicroBatch int `yaml:"micro_batch" json:"micro_batch"`
	// GradAccum is the micro-batches per optimizer step. Default 1.
	GradAccum int `yaml:"grad_accum" json:"grad_accum"`
	// LR is the peak learning rate. Default 2e-5.
	LR float64 `yaml:"lr" json:"lr"`
	// MinLR is where the decay ends. Default 0.1*lr.
	MinLR float64 `yaml:"min_lr" json:"min_lr"`
	// WarmupSteps ramp the LR linearly from lr/warmup to lr. Default 0.
	WarmupSteps int `yaml:"warmup_steps" json:"warmup_steps"`
	// LRSchedule is "cosine" (default), "wsd" or "constant".
	LRSchedule string `yaml:"lr_schedule" json:"lr_schedule"`
	// DecayFrac is the final fraction of steps over which wsd decays.
	// Default 0.1.
	DecayFrac float64 `yaml:"decay_frac" json:"decay_frac"`
	// Beta1, Beta2 and Eps are AdamW's. Defaults 0.9, 0.95, 1e-8.
	Beta1 float64 `yaml:"beta1" json:"beta1"`
	Beta2 float64 `yaml:"beta2" json:"beta2"`
	Eps   float64 `yaml:"eps" json:"eps"`
	// WeightDecay applies to 2-d weights only (not norms or biases).
	// Default 0.1.
	WeightDecay float64 `yaml:"weight_decay" json:"weight_decay"`
	// GradClip is the global gradient-norm bound; 0 disables. Default 1.
	GradClip float64 `yaml:"grad_clip" json:"grad_clip"`

	// Device is "auto" (default: the first GPU, else the CPU), "cpu",
	// "cuda" or "cuda:N".
	Device string `yaml:"device" json:"device"`
	// DType is the compute precision: "f32" or "bf16" (master weights,
	// gradients and optimizer moments stay float32). Default "bf16" on a
	// GPU, "f32" on the CPU ("auto").
	DType string `yaml:"dtype" json:"dtype"`
	// Threads is libtorch's intra-op thread count on the CPU; 0 (default)
	// keeps one per core. Small models on a busy CPU run faster with 1
	// (OpenMP threads spin while waiting for each other).
	Threads int `yaml:"threads" json:"threads"`
	// CheckpointLayers recomputes each layer in the backward pass instead of
	// keeping its activations. Default false.
	CheckpointLayers bool `yaml:"checkpoint_layers" json:"checkpoint_layers"`
	// KeepLayers, with CheckpointLayers, keeps the activations of the last
	// N layers instead of recomputing them: less recomputation for more
	// memory (about a 42nd of the no-checkpointing activations per layer
	// for MiniCPM5-2B). Default 0.
	KeepLayers int `yaml:"keep_layers" json:"keep_layers"`
	// LossChunkRows bounds the rows whose logits (rows x vocab, float32)
	// exist at once. Default 2048.
	LossChunkRows int `yaml:"loss_chunk_rows" json:"loss_chunk_rows"`
	// Seed fixes data order, noise and random init. Default 0.
	Seed uint64 `yaml:"seed" json:"seed"`

	// CheckpointEvery writes a checkpoint every N steps (and at the end);
	// 0 only at the end; -1 never (speed runs: nothing to resume or export).
	// Default 1000.
	CheckpointEvery int `yaml:"checkpoint_every" json:"checkpoint_every"`
	// KeepCheckpoints is how many checkpoints to keep (oldest removed
	// first). Default 3.
	KeepCheckpoints int `yaml:"keep_checkpoints" json:"keep_checkpoints"`
	// EvalEvery computes the eval loss every N steps (and at the end) when
	// data.eval is set; 0 only at the end. Default 500.
	EvalEvery int `yaml:"eval_every" json:"eval_every"`
	// EvalSeqs is the number of held-out sequences evaluated. Default 16.
	EvalSeqs int `yaml:"eval_seqs" json:"eval_seqs"`
	// SampleEvery generates a sample with the diffusion sampler every N
	// steps; 0 (default) never.
	SampleEvery int `yaml:"sample_every" json:"sample_every"`
	// SamplePrompt is the sample's prompt text. Default "Once upon a time".
	SamplePrompt string `yaml:"sample_prompt" json:"sample_prompt"`
	// SampleTokens is the sample's length. Default 64.
	SampleTokens int `yaml:"sample_tokens" json:"sample_tokens"`
	// LogEvery prints a log line every N steps when not on a terminal.
	// Default 10.
	LogEvery int `yaml:"log_every" json:"log_every"`
	// PeakTFLOPS is the accelerator's dense bf16 peak for MFU. Default 989
	// (H100/H200 SXM).
	PeakTFLOPS float64 `yaml:"peak_tflops" json:"peak_tflops"`
	// Export writes a servable model directory at the end. Default true.
	Export bool `yaml:"export" json:"export"`
	// ExportDType is the exported weights' dtype: "auto" (default: the
	// model's config.json dtype), "bf16", "f16" or "f32".
	ExportDType string `yaml:"export_dtype" json:"export_dtype"`
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		Init:            InitPretrained,
		MaskTokenID:     -1,
		Data:            DataConfig{Shuffle: true},
		Out:             "out/train",
		Objective:       ObjectiveBlock,
		BlockSchedule:   []BlockStage{{Step: 0, Size: 32}},
		Shift:           true,
		Complementary:   true,
		TFloor:          0.1,
		Distill:         DistillConfig{Temperature: 1},
		MicroBatch:      1,
		GradAccum:       1,
		LR:              2e-5,
		MinLR:           -1, // resolved to 0.1*lr by Validate
		LRSchedule:      ScheduleCosine,
		DecayFrac:       0.1,
		Beta1:           0.9,
		Beta2:           0.95,
		Eps:             1e-8,
		WeightDecay:     0.1,
		GradClip:        1,
		Device:          "auto",
		DType:           "auto",
		LossChunkRows:   2048,
		CheckpointEvery: 1000,
		KeepCheckpoints: 3,
		EvalEvery:       500,
		EvalSeqs:        16,
		SamplePrompt:    "Once upon a time",
		SampleTokens:    64,
		LogEvery:        10,
		PeakTFLOPS:      989,
		Export:          true,
		ExportDType:     "auto",
	}
}

// Load reads a YAML file over c. Unknown keys are errors: a misspelt key
// must not leave a default silently in place. A block_schedule in the file
// replaces the default one as a whole.
func (c *Config) Load(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("train: config: %w", err)
	}
	if err := c.parse(data); err != nil {
		return fmt.Errorf("train: config %s: %w", path, err)
	}
	return nil
}

// Set applies one KEY=VALUE override, VALUE in YAML, KEY a config key or a
// dotted path into a mapping (data.eval=DIR); unknown keys are errors as in
// a file.
func (c *Config) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return fmt.Errorf("train: --set %q: want KEY=VALUE", kv)
	}
	parts := strings.Split(k, ".")
	var b strings.Builder
	for i, p := range parts {
		fmt.Fprintf(&b, "%s%s:", strings.Repeat("  ", i), p)
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, " %s\n", v)
	if err := c.parse([]byte(b.String())); err != nil {
		return fmt.Errorf("train: --set %s: %w", kv, err)
	}
	return nil
}

func (c *Config) parse(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) { // EOF: empty file
		return err
	}
	return nil
}

// Validate resolves the "auto" and derived defaults that do not need the
// hardware (min_lr) and checks every field, reporting all problems at once.
func (c *Config) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.Model == "" && !(c.Init == InitRandom && c.ModelConfig != "") {
		bad("model: a model directory is required (--model)")
	}
	switch c.Init {
	case InitPretrained, InitRandom:
	default:
		bad("init %q: want %s or %s", c.Init, InitPretrained, InitRandom)
	}
	if c.Data.Train == "" {
		bad("data.train: a data directory (dllm data prepare --out) or %q is required", Synthetic)
	}
	if c.Data.Eval == Synthetic {
		bad("data.eval: synthetic data has nothing to evaluate")
	}
	if c.Data.HoldOut < 0 || (c.Data.HoldOut > 0 && (c.Data.Eval != "" || c.Data.Train == Synthetic)) {
		bad("data.hold_out %d: want >= 0, and only without data.eval and synthetic data", c.Data.HoldOut)
	}
	if c.Data.Train == Synthetic && c.SeqLen <= 0 {
		bad("seq_len: synthetic data needs seq_len")
	}
	if c.Out == "" {
		bad("out: an output directory is required")
	}
	switch c.Objective {
	case ObjectiveBlock, ObjectiveAR, ObjectiveMDM:
	default:
		bad("objective %q: want %s, %s or %s", c.Objective, ObjectiveBlock, ObjectiveAR, ObjectiveMDM)
	}
	if c.SeqLen < 0 || c.SeqLen == 1 {
		bad("seq_len %d: want 0 (the data's) or at least 2", c.SeqLen)
	}
	if len(c.BlockSchedule) == 0 {
		bad("block_schedule: at least one stage is required")
	}
	for i, s := range c.BlockSchedule {
		if i == 0 && s.Step != 0 {
			bad("block_schedule: the first stage must start at step 0, not %d", s.Step)
		}
		if i > 0 && s.Step <= c.BlockSchedule[i-1].Step {
			bad("block_schedule: stage %d starts at step %d, not after the previous stage's %d", i, s.Step, c.BlockSchedule[i-1].Step)
		}
		if s.Size < 1 {
			bad("block_schedule: stage %d has size %d; want at least 1", i, s.Size)
		}
	}
	if !(c.TMin >= 0 && c.TMin < 1) {
		bad("t_min %v: want 0 <= t_min < 1", c.TMin)
	}
	if !(c.TFloor > 0 && c.TFloor <= 1) {
		bad("t_floor %v: want 0 < t_floor <= 1", c.TFloor)
	}
	if !(c.ARLossWeight >= 0) || math.IsInf(c.ARLossWeight, 0) {
		bad("ar_loss_weight %v: want a finite value >= 0", c.ARLossWeight)
	}
	if c.ARLossWeight > 0 && c.Objective != ObjectiveBlock {
		bad("ar_loss_weight: only the block objective has a clean copy to take an AR loss on")
	}
	if !(c.ConfidenceLossWeight >= 0) || math.IsInf(c.ConfidenceLossWeight, 0) {
		bad("confidence_loss_weight %v: want a finite value >= 0", c.ConfidenceLossWeight)
	}
	if c.ConfidenceLossWeight > 0 && c.Objective == ObjectiveAR {
		bad("confidence_loss_weight: the ar objective has no diffusion targets")
	}
	if c.AnnealSteps < 0 {
		bad("anneal_steps %d: want >= 0", c.AnnealSteps)
	}
	if c.AnnealSteps > 0 && c.Objective != ObjectiveMDM {
		bad("anneal_steps: attention annealing belongs to the mdm objective")
	}
	if !(c.Distill.Weight >= 0) || math.IsInf(c.Distill.Weight, 0) {
		bad("distill.weight %v: want a finite value >= 0 (0: off)", c.Distill.Weight)
	}
	if !(c.Distill.Temperature > 0) || math.IsInf(c.Distill.Temperature, 0) {
		bad("distill.temperature %v: want a finite value > 0", c.Distill.Temperature)
	}
	if c.Distill.Weight > 0 && c.Distill.Teacher == "" && c.Init == InitRandom {
		bad("distill.teacher: init: random has no starting model to distill from; name a teacher model directory")
	}
	if c.Steps < 1 {
		bad("steps %d: want at least 1", c.Steps)
	}
	if c.MicroBatch < 1 || c.GradAccum < 1 {
		bad("micro_batch %d, grad_accum %d: want at least 1 each", c.MicroBatch, c.GradAccum)
	}
	if !(c.LR > 0) || math.IsInf(c.LR, 0) {
		bad("lr %v: want > 0", c.LR)
	}
	if c.MinLR < 0 {
		c.MinLR = 0.1 * c.LR
	}
	if c.MinLR > c.LR {
		bad("min_lr %v: must not exceed lr %v", c.MinLR, c.LR)
	}
	if c.WarmupSteps < 0 {
		bad("warmup_steps %d: want >= 0", c.WarmupSteps)
	}
	switch c.LRSchedule {
	case ScheduleCosine, ScheduleWSD, ScheduleConstant:
	default:
		bad("lr_schedule %q: want %s, %s or %s", c.LRSchedule, ScheduleCosine, ScheduleWSD, ScheduleConstant)
	}
	if !(c.DecayFrac >= 0 && c.DecayFrac <= 1) {
		bad("decay_frac %v: want 0 to 1", c.DecayFrac)
	}
	if !(c.Beta1 >= 0 && c.Beta1 < 1 && c.Beta2 >= 0 && c.Beta2 < 1) {
		bad("beta1 %v, beta2 %v: want [0, 1)", c.Beta1, c.Beta2)
	}
	if !(c.Eps > 0) {
		bad("eps %v: want > 0", c.Eps)
	}
	if !(c.WeightDecay >= 0) || !(c.GradClip >= 0) {
		bad("weight_decay %v, grad_clip %v: want >= 0", c.WeightDecay, c.GradClip)
	}
	switch c.DType {
	case "auto", "f32", "bf16":
	default:
		bad("dtype %q: want auto, f32 or bf16", c.DType)
	}
	switch c.ExportDType {
	case "auto", "f32", "bf16", "f16":
	default:
		bad("export_dtype %q: want auto, bf16, f16 or f32", c.ExportDType)
	}
	if c.Threads < 0 {
		bad("threads %d: want 0 (one per core) or more", c.Threads)
	}
	if c.LossChunkRows < 1 {
		bad("loss_chunk_rows %d: want at least 1", c.LossChunkRows)
	}
	if c.CheckpointEvery < -1 || c.EvalEvery < 0 || c.SampleEvery < 0 || c.LogEvery < 0 {
		bad("eval_every, sample_every and log_every must not be negative, checkpoint_every not below -1 (never)")
	}
	if c.KeepLayers < 0 {
		bad("keep_layers %d: want 0 or more", c.KeepLayers)
	}
	if c.KeepCheckpoints < 1 {
		bad("keep_checkpoints %d: want at least 1", c.KeepCheckpoints)
	}
	if c.EvalSeqs < 1 {
		bad("eval_seqs %d: want at least 1", c.EvalSeqs)
	}
	if c.SampleTokens < 1 {
		bad("sample_tokens %d: want at least 1", c.SampleTokens)
	}
	if !(c.PeakTFLOPS > 0) {
		bad("peak_tflops %v: want > 0", c.PeakTFLOPS)
	}
	if len(errs) > 0 {
		return fmt.Errorf("train: config: %s", strings.Join(errs, "; "))
	}
	return nil
}

// YAML renders the config as a file Load accepts (saved in checkpoints).
func (c *Config) YAML() []byte {
	b, err := yaml.Marshal(c)
	if err != nil {
		panic(err) // plain values: cannot fail
	}
	return b
}

// Hash is the hex sha256 of the config's canonical JSON: it identifies the
// recipe in train.json and checkpoints.
func (c *Config) Hash() string {
	b, _ := json.Marshal(c) // plain values: cannot fail
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// resumeDiffs names the fields that differ between a checkpoint's config
// and this one, leaving out those that may change on resume without
// touching the maths of the steps already taken (length and bookkeeping).
func resumeDiffs(old, cur *Config) []string {
	free := map[string]bool{"steps": true, "out": true, "checkpoint_every": true, "keep_checkpoints": true,
		"eval_every": true, "eval_seqs": true, "sample_every": true, "sample_prompt": true, "sample_tokens": true,
		"log_every": true, "peak_tflops": true, "export": true, "export_dtype": true, "device": true, "threads": true,
		"keep_layers": true}
	// Whether incomplete data was allowed says nothing of the steps taken.
	o, c := *old, *cur
	o.Data.AllowIncomplete, c.Data.AllowIncomplete = false, false
	var a, b map[string]any
	ja, _ := json.Marshal(o)
	jb, _ := json.Marshal(c)
	json.Unmarshal(ja, &a)
	json.Unmarshal(jb, &b)
	var diffs []string
	for k, v := range b {
		if free[k] {
			continue
		}
		if !reflect.DeepEqual(a[k], v) {
			x, _ := json.Marshal(a[k])
			y, _ := json.Marshal(v)
			diffs = append(diffs, fmt.Sprintf("%s %s -> %s", k, x, y))
		}
	}
	slices.Sort(diffs)
	return diffs
}
