package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"dllm/data"
	"dllm/diffusion"
	"dllm/model"
	"dllm/torch"
)

func weightsOf(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	m, err := model.Load(dir, model.LoadOptions{Device: torch.CPU, DType: torch.Float32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	w := map[string][]float32{}
	for _, p := range namedParams(m) {
		w[p.name] = p.t.Float32s()
	}
	return w
}

func maxRelDiff(a, b map[string][]float32) (float64, string) {
	worst, at := 0.0, ""
	for name, x := range a {
		y := b[name]
		for i := range x {
			d := math.Abs(float64(x[i]-y[i])) / (1e-3 + math.Abs(float64(x[i])))
			if d > worst {
				worst, at = d, fmt.Sprintf("%s[%d]", name, i)
			}
		}
	}
	return worst, at
}

func TestExport(t *testing.T) {
	dir := tinyModel(t)
	out := t.TempDir()
	c := tinyConfig(dir, out)
	c.Steps, c.Export = 6, true
	c.BlockSchedule = []BlockStage{{0, 2}, {4, 4}}
	res, err := Run(context.Background(), c, Options{Train: toySource(t, 8, 16), CreatedBy: "dllm test"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Export != filepath.Join(out, "model-step-0000006") {
		t.Fatalf("exported to %q", res.Export)
	}
	// The source model's sums describe its files, not the checkpoint's.
	if b := readCheckpointFile(t, out, 6, settingsName); strings.Contains(string(b), "weights_sha256") {
		t.Errorf("the checkpoint's settings carry the source's weight sums:\n%s", b)
	}
	for _, tc := range []struct {
		name, dtype string
		want        torch.DType
	}{{"auto (config.json's float32)", "", torch.Float32}, {"bf16", "bf16", torch.BFloat16}} {
		t.Run(tc.name, func(t *testing.T) {
			exp := res.Export
			if tc.dtype != "" {
				exp = filepath.Join(t.TempDir(), "m")
				if err := Export(res.Checkpoint, exp, ExportOptions{DType: tc.dtype}); err != nil {
					t.Fatal(err)
				}
			}
			m, err := model.Load(exp, model.LoadOptions{Device: torch.CPU})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Free()
			if m.DType != tc.want {
				t.Errorf("weights are %v, want %v", m.DType, tc.want)
			}
			s, err := diffusion.LoadSettings(exp)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(m.Config.VocabSize); err != nil {
				t.Fatal(err)
			}
			if s.BlockSize != 4 || s.Generation.MaxStepsPerBlock != 4 || !s.Shift || s.MaskTokenID != tinyMaskID {
				t.Errorf("dllm.json: %+v", s)
			}
			if err := model.VerifyWeights(context.Background(), exp, s.WeightsSHA256); err != nil || len(s.WeightsSHA256) != 1 {
				t.Errorf("weights_sha256 %v: %v", s.WeightsSHA256, err)
			}
			var info TrainInfo
			b, err := os.ReadFile(filepath.Join(exp, TrainInfoFile))
			if err == nil {
				err = json.Unmarshal(b, &info)
			}
			if err != nil || info.Steps != 6 || info.TokensSeen != 6*4*16 || info.Objective != ObjectiveBlock || info.ConfigHash == "" {
				t.Errorf("train.json: %+v (%v)", info, err)
			}
			for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
				if fi, err := os.Lstat(filepath.Join(exp, f)); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("%s not copied as a file: %v", f, err)
				}
			}
			// The sampler runs on it.
			r, err := diffusion.NewSampler(m, s).Generate(context.Background(), []int64{20, 21, 22}, diffusion.Options{MaxNewTokens: 8, ContextLimit: 32}, nil)
			if err != nil || len(r.IDs) == 0 {
				t.Fatalf("sampler on the export: %v %v", r, err)
			}
		})
	}
	// The exported float32 weights are the checkpoint's.
	if d, at := maxRelDiff(weightsOf(t, res.Checkpoint), weightsOf(t, res.Export)); d != 0 {
		t.Errorf("exported weights differ from the checkpoint at %s", at)
	}
	if err := Export(res.Checkpoint, res.Export, ExportOptions{}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("export over an existing directory: %v", err)
	}
}

// TestLayerCheckpointingMatches: recomputing layers in the backward pass
// (all, or all but the last one or two: keep_layers) gives exactly the
// training of keeping the activations; computing the head in many chunks
// gives the same losses.
func TestLayerCheckpointingMatches(t *testing.T) {
	dir := tinyModel(t)
	src := toySource(t, 4, 16)
	var ws []map[string][]float32
	var losses [][]float64
	for _, v := range []struct {
		ckpt  bool
		chunk int
		keep  int
	}{{false, 2048, 0}, {true, 2048, 0}, {true, 5, 0}, {true, 2048, 1}, {true, 2048, 2}, {true, 2048, 99}} {
		c := tinyConfig(dir, t.TempDir())
		c.Steps, c.CheckpointLayers, c.ARLossWeight, c.LossChunkRows, c.KeepLayers = 3, v.ckpt, 0.3, v.chunk, v.keep
		res, err := Run(context.Background(), c, Options{Train: src})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, weightsOf(t, res.Checkpoint))
		losses = append(losses, res.Losses)
	}
	for i, keep := range map[int]int{1: 0, 3: 1, 4: 2, 5: 99} {
		if d, at := maxRelDiff(ws[0], ws[i]); d != 0 {
			t.Fatalf("with layer checkpointing (keep_layers %d) the weights after 3 steps differ by %.3g (relative) at %s", keep, d, at)
		}
	}
	for i := range losses[0] {
		if math.Abs(losses[2][i]-losses[0][i]) > 1e-5*losses[0][i] {
			t.Fatalf("losses with the head in chunks of 5 rows %v, in one chunk %v", losses[2], losses[0])
		}
	}
}

// TestBF16Compute: bf16 compute keeps float32 masters that train.
func TestBF16Compute(t *testing.T) {
	dir := tinyModel(t)
	src := toySource(t, 4, 16)
	var first []float64
	for _, dt := range []string{"f32", "bf16"} {
		c := tinyConfig(dir, t.TempDir())
		c.Steps, c.DType, c.CheckpointLayers = 4, dt, dt == "bf16"
		c.LossChunkRows = 7 // several backward passes through the bf16 head
		res, err := Run(context.Background(), c, Options{Train: src})
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, res.Losses[0])
		t.Logf("%s: losses %.4f", dt, res.Losses)
		if !(res.Losses[3] < res.Losses[0]) {
			t.Errorf("%s: loss did not fall: %v", dt, res.Losses)
		}
		m, err := model.Load(res.Checkpoint, model.LoadOptions{Device: torch.CPU})
		if err != nil {
			t.Fatal(err)
		}
		if m.DType != torch.Float32 {
			t.Errorf("%s: checkpoint weights are %v, want float32 masters", dt, m.DType)
		}
		m.Free()
	}
	if math.Abs(first[1]-first[0]) > 0.05*first[0] {
		t.Fatalf("first loss f32 %.4f, bf16 %.4f: too far apart", first[0], first[1])
	}
}

// TestRandomInitSynthetic is the GPU speed run's path at toy size: random
// weights of a config.json, synthetic data, metrics, export without a
// tokenizer.
func TestRandomInitSynthetic(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Skip(err)
	}
	out := t.TempDir()
	c := DefaultConfig()
	c.Init, c.ModelConfig = InitRandom, "../testdata/tiny-llama/config.json"
	c.Data.Train, c.SeqLen = Synthetic, 16
	c.Out, c.Device, c.Steps, c.LogEvery = out, "cpu", 3, 1
	c.BlockSchedule = []BlockStage{{0, 4}}
	var log strings.Builder
	res, err := Run(context.Background(), c, Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "step 3/3") || !strings.Contains(log.String(), "mfu n/a") {
		t.Errorf("log:\n%s", log.String())
	}
	f, err := os.Open(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []Record
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 || recs[2].Step != 3 || recs[2].Tokens != 3*16 || recs[2].BlockSize != 4 || recs[2].MFU != nil || !(recs[2].Loss > 0) {
		t.Errorf("metrics: %+v", recs)
	}
	s, err := diffusion.LoadSettings(res.Export)
	if err != nil || s.MaskTokenID != 511 || s.BlockSize != 4 {
		t.Fatalf("exported settings %+v (%v)", s, err)
	}
}

// TestShardData trains from `dllm data prepare` output, holding out the
// last sequences for the eval loss.
func TestShardData(t *testing.T) {
	dir := tinyModel(t)
	tmp := t.TempDir()
	var b strings.Builder
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&b, `{"text": "The %d cats sat on %d mats and one of them said hello to the others."}`+"\n", i, i+1)
	}
	if err := os.WriteFile(filepath.Join(tmp, "c.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	dc := data.DefaultConfig()
	dc.Tokenizer, dc.Out, dc.SeqLen, dc.ShardTokens, dc.Workers = dir, filepath.Join(tmp, "data"), 32, 32*8, 1
	dc.Sources = []data.SourceConfig{{Name: "c", Kind: data.KindText, Paths: []string{filepath.Join(tmp, "c.jsonl")}}}
	if _, err := data.Prepare(context.Background(), data.Options{Config: dc}); err != nil {
		t.Fatal(err)
	}
	src, err := OpenData(dc.Out, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if src.SeqLen() != 32 || src.Len() < 10 {
		t.Fatalf("data: %d sequences of %d", src.Len(), src.SeqLen())
	}
	q := src.Seq(1)
	if len(q.starts) == 0 || len(q.tokens) != 32 {
		t.Fatalf("sequence 1: %d tokens, starts %v", len(q.tokens), q.starts)
	}
	src.Close()
	c := tinyConfig(dir, filepath.Join(tmp, "out"))
	c.Data.Train, c.Data.HoldOut, c.Steps, c.EvalSeqs = dc.Out, 4, 4, 4
	var log strings.Builder
	res, err := Run(context.Background(), c, Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if !(res.EvalLoss > 0) || math.IsInf(res.EvalLoss, 0) {
		t.Fatalf("eval loss %v", res.EvalLoss)
	}
	// The run ends with its summary and a picture of its metrics.
	for _, want := range []string{"summary:", "steps            1-4 of 4", "best eval loss   ", "throughput", PlotFile} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, log.String())
		}
	}
	if b, err := os.ReadFile(filepath.Join(c.Out, PlotFile)); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("%s: %v", PlotFile, err)
	}
	if _, err := OpenData(tmp, false, nil); err == nil || !strings.Contains(err.Error(), "dllm data prepare") {
		t.Fatalf("a directory without manifest: %v", err)
	}
}

// TestNoTensorLeaks: with the garbage collector off (so that no cleanup
// hides a forgotten Free), a step leaves as many live tensors as it found,
// in every path (checkpointing, bf16 view, AR loss, eval, checkpoints), and
// a finished run frees everything it made.
func TestNoTensorLeaks(t *testing.T) {
	dir := tinyModel(t)
	src := toySource(t, 4, 16)
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, v := range []struct {
		name string
		edit func(c *Config)
	}{
		{"block", func(c *Config) {}},
		{"block-bf16-ckpt-ar", func(c *Config) { c.DType, c.CheckpointLayers, c.ARLossWeight, c.LossChunkRows = "bf16", true, 0.5, 7 }},
		{"block-bf16-ckpt-distill", func(c *Config) {
			c.DType, c.CheckpointLayers, c.LossChunkRows, c.Distill.Weight, c.Distill.Temperature = "bf16", true, 7, 0.5, 2
		}},
		{"mdm-anneal", func(c *Config) { c.Objective, c.AnnealSteps = ObjectiveMDM, 4 }},
		{"ar", func(c *Config) { c.Objective = ObjectiveAR }},
	} {
		t.Run(v.name, func(t *testing.T) {
			c := tinyConfig(dir, t.TempDir())
			c.Steps, c.EvalEvery, c.CheckpointEvery = 6, 2, 2
			c.Data.HoldOut = 1
			v.edit(&c)
			before := torch.LiveTensors()
			live := map[int]int64{}
			if _, err := Run(context.Background(), c, Options{Train: src, afterStep: func(s int) { live[s] = torch.LiveTensors() }}); err != nil {
				t.Fatal(err)
			}
			if live[6] != live[2] {
				t.Errorf("live tensors after step 2: %d, after step 6: %d", live[2], live[6])
			}
			if after := torch.LiveTensors(); after != before {
				t.Errorf("live tensors before the run %d, after %d", before, after)
			}
		})
	}
}
