package train

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func TestLRSchedules(t *testing.T) {
	base := DefaultConfig()
	base.Steps, base.LR, base.MinLR, base.WarmupSteps = 110, 1.0, 0.1, 10
	for _, tc := range []struct {
		schedule string
		decay    float64
		want     map[int]float64 // step -> lr
	}{
		{ScheduleCosine, 0, map[int]float64{0: 0.1, 4: 0.5, 9: 1, 10: 1, 59: 0.1 + 0.9*(1+math.Cos(math.Pi*49/99))/2, 109: 0.1}},
		{ScheduleWSD, 0.2, map[int]float64{0: 0.1, 9: 1, 50: 1, 87: 1, 88: 1 - 0.9/22, 98: 1 - 0.9*11/22, 109: 0.1}},
		{ScheduleConstant, 0, map[int]float64{0: 0.1, 9: 1, 10: 1, 109: 1}},
	} {
		c := base
		c.LRSchedule, c.DecayFrac = tc.schedule, tc.decay
		if err := c.Validate(); err == nil {
			t.Fatal("a config without model and data should not validate")
		}
		for s, want := range tc.want {
			if got := c.LRAt(s); math.Abs(got-want) > 1e-12 {
				t.Errorf("%s: lr at step %d = %v, want %v", tc.schedule, s, got, want)
			}
		}
		// Monotone after the warm-up.
		for s := c.WarmupSteps + 1; s < c.Steps; s++ {
			if c.LRAt(s) > c.LRAt(s-1)+1e-15 {
				t.Errorf("%s: lr rises from step %d to %d", tc.schedule, s-1, s)
			}
		}
	}
}

func TestBlockSchedule(t *testing.T) {
	c := DefaultConfig()
	c.Steps = 1000
	c.BlockSchedule = []BlockStage{{0, 1}, {200, 4}, {400, 32}}
	for s, want := range map[int]int{0: 1, 199: 1, 200: 4, 399: 4, 400: 32, 999: 32} {
		if got := c.BlockSizeAt(s); got != want {
			t.Errorf("block size at step %d = %d, want %d", s, got, want)
		}
	}
	if got := c.FinalBlockSize(); got != 32 {
		t.Errorf("final block size %d, want 32", got)
	}
	c.Steps = 300
	if got := c.FinalBlockSize(); got != 4 {
		t.Errorf("final block size of a 300-step run %d, want 4", got)
	}
}

func TestConfigParse(t *testing.T) {
	valid := "model: m\nsteps: 10\ndata: {train: d}\n"
	for _, tc := range []struct {
		name, yaml string
		err        string // "" = valid
		check      func(c *Config) bool
	}{
		{"defaults", valid, "", func(c *Config) bool {
			return c.Objective == ObjectiveBlock && c.Shift && c.Complementary && c.Data.Shuffle && c.MinLR == 0.1*c.LR && c.BlockSizeAt(0) == 32
		}},
		{"synthetic scalar", "model: m\nsteps: 10\nseq_len: 64\ndata: synthetic\n", "", func(c *Config) bool { return c.Data.Train == Synthetic }},
		{"schedule replaces the default", valid + "block_schedule: [{step: 0, size: 1}, {step: 5, size: 8}]\n", "", func(c *Config) bool {
			return len(c.BlockSchedule) == 2 && c.BlockSizeAt(9) == 8
		}},
		{"bools off", valid + "shift: false\ncomplementary: false\n", "", func(c *Config) bool { return !c.Shift && !c.Complementary }},
		{"unknown key", valid + "learning_rate: 1\n", "field learning_rate not found", nil},
		{"unknown data key", "model: m\nsteps: 10\ndata: {train: d, shufle: false}\n", "field shufle not found", nil},
		{"bad data scalar", "model: m\nsteps: 10\ndata: corpus\n", `data: "corpus"`, nil},
		{"synthetic needs seq_len", "model: m\nsteps: 10\ndata: synthetic\n", "synthetic data needs seq_len", nil},
		{"bad objective", valid + "objective: bert\n", `objective "bert"`, nil},
		{"schedule must start at 0", valid + "block_schedule: [{step: 3, size: 4}]\n", "first stage must start at step 0", nil},
		{"schedule order", valid + "block_schedule: [{step: 0, size: 4}, {step: 0, size: 8}]\n", "not after the previous", nil},
		{"ar weight needs block", valid + "objective: mdm\nar_loss_weight: 1\n", "only the block objective", nil},
		{"confidence weight negative", valid + "confidence_loss_weight: -1\n", "confidence_loss_weight -1", nil},
		{"confidence weight needs diffusion", valid + "objective: ar\nconfidence_loss_weight: 1\n", "no diffusion targets", nil},
		{"anneal needs mdm", valid + "anneal_steps: 10\n", "belongs to the mdm objective", nil},
		{"no steps", "model: m\ndata: {train: d}\n", "steps 0", nil},
		{"bad dtype", valid + "dtype: fp8\n", `dtype "fp8"`, nil},
		{"distill off by default", valid, "", func(c *Config) bool { return c.Distill == DistillConfig{Temperature: 1} }},
		{"distill partial mapping", valid + "distill: {weight: 0.5}\n", "", func(c *Config) bool {
			return c.Distill.Weight == 0.5 && c.Distill.Temperature == 1 && c.teacherDir() == "m"
		}},
		{"distill teacher", valid + "distill: {teacher: ar, weight: 1, temperature: 2}\n", "", func(c *Config) bool { return c.teacherDir() == "ar" }},
		{"distill unknown key", valid + "distill: {wieght: 1}\n", "field wieght not found", nil},
		{"distill negative weight", valid + "distill: {weight: -1}\n", "distill.weight -1", nil},
		{"distill temperature 0", valid + "distill: {weight: 1, temperature: 0}\n", "distill.temperature 0", nil},
		{"distill random init needs a teacher", "model_config: c.json\ninit: random\nsteps: 10\nseq_len: 8\ndata: synthetic\ndistill: {weight: 1}\n", "init: random has no starting model", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			err := c.parse([]byte(tc.yaml))
			if err == nil {
				err = c.Validate()
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			case tc.check != nil && !tc.check(&c):
				t.Fatalf("config not as expected: %+v", c)
			}
		})
	}
}

func TestConfigRoundTrip(t *testing.T) {
	c := DefaultConfig()
	c.Model, c.Steps, c.Data.Train = "m", 10, Synthetic
	c.SeqLen = 64
	c.BlockSchedule = []BlockStage{{0, 1}, {4, 8}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if err := d.parse(c.YAML()); err != nil {
		t.Fatal(err)
	}
	if c.Hash() != d.Hash() {
		t.Fatalf("config changed through YAML:\n%s", c.YAML())
	}
	d.LR *= 2
	if diffs := resumeDiffs(&c, &d); len(diffs) != 1 || !strings.HasPrefix(diffs[0], "lr ") {
		t.Fatalf("resume diffs %v, want only lr", diffs)
	}
	d.LR, d.Steps = c.LR, 20
	if diffs := resumeDiffs(&c, &d); len(diffs) != 0 {
		t.Fatalf("changing steps is allowed on resume, got diffs %v", diffs)
	}
}

func TestPresets(t *testing.T) {
	files, _ := filepath.Glob("../configs/train/*.yaml")
	proxy, _ := filepath.Glob("../configs/proxy/*/*.yaml")
	proxy2, _ := filepath.Glob("../configs/proxy/*.yaml")
	proxy = append(proxy, proxy2...)
	for _, f := range proxy {
		if !strings.HasPrefix(filepath.Base(f), "data") {
			files = append(files, f)
		}
	}
	if len(files) < 6 {
		t.Fatalf("presets: %v", files)
	}
	for _, f := range files {
		c := DefaultConfig()
		if err := c.Load(f); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	c := DefaultConfig()
	if err := c.Load("../configs/train/minicpm5-2b-block.yaml"); err != nil {
		t.Fatal(err)
	}
	// The warm-up reaches the final block of 32 within the first 10%.
	if c.FinalBlockSize() != 32 || c.BlockSizeAt(c.Steps/10) != 32 || c.BlockSizeAt(0) != 1 || !c.CheckpointLayers || c.DType != "bf16" || c.SeqLen != 4096 {
		t.Fatalf("minicpm preset: %+v", c)
	}
}

func TestSet(t *testing.T) {
	c := DefaultConfig()
	for _, kv := range []string{"lr=0.5", "data.eval=held", "block_schedule=[{step: 0, size: 2}]", "data.train=d", "distill.weight=0.25"} {
		if err := c.Set(kv); err != nil {
			t.Fatal(err)
		}
	}
	if c.LR != 0.5 || c.Data.Eval != "held" || c.Data.Train != "d" || !c.Data.Shuffle || c.BlockSizeAt(5) != 2 || c.Distill != (DistillConfig{Weight: 0.25, Temperature: 1}) {
		t.Fatalf("after --set: %+v", c)
	}
	for _, kv := range []string{"lr", "=1", "lrate=1", "data.nope=1", "lr=abc", "distill.nope=1"} {
		if err := c.Set(kv); err == nil {
			t.Errorf("--set %q accepted", kv)
		}
	}
}
