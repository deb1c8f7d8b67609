package model

import (
	"math"
	"testing"

	"dllm/torch"
)

// The expected values below are worked out by hand from the formulas in
// transformers' src/transformers/modeling_rope_utils.py (v5):
//
//	default: inv[i] = theta^(-2i/dim)
//	linear:  inv[i] / factor
//	llama3:  wave = 2*pi/inv; wave < orig/high: inv; wave > orig/low: inv/factor;
//	         else s = (orig/wave - low)/(high - low), (1-s)*inv/factor + s*inv
//	yarn:    corr(r) = dim*ln(orig/(2*pi*r)) / (2*ln(theta));
//	         lo = floor(corr(beta_fast)), hi = ceil(corr(beta_slow)) (no rounding
//	         when truncate=false), clamped to [0, dim-1];
//	         ramp(i) = clamp((i-lo)/(hi-lo), 0, 1);
//	         inv_yarn = inv/factor*ramp + inv*(1-ramp);
//	         attention = attention_factor, else mscale(f, mscale)/mscale(f, mscale_all_dim)
//	         if both set, else mscale(f, 1), with mscale(f, m) = 0.1*m*ln(f) + 1 (1 if f <= 1)
//
// head_dim 8 with theta 10000 makes the default frequencies 10^-i:
// theta^(-2i/8) = 10^(-4i/4) = 10^-i, i = 0..3.

func ropeConfig(s *RopeScaling) *Config {
	return &Config{HeadDim: 8, RopeTheta: 10000, MaxPositionEmbeddings: 4096, RopeScaling: s}
}

func assertFreqs(t *testing.T, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d frequencies, want %d", len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12*math.Max(1, math.Abs(want[i])) {
			t.Errorf("inv_freq[%d] = %.15g, want %.15g", i, got[i], want[i])
		}
	}
}

func TestInvFreqDefaultTinyLlama(t *testing.T) {
	c, err := LoadConfig("../testdata/tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	f := c.InvFreq()
	// head_dim 16, theta 5e6: inv[i] = 5e6^(-i/8), so inv[0] = 1,
	// inv[4] = 1/sqrt(5e6) = 1/2236.0679774997897, and each step is a
	// factor 5e6^(-1/8).
	want := make([]float64, 8)
	for i := range want {
		want[i] = math.Pow(5e6, -float64(i)/8)
	}
	assertFreqs(t, f, want)
	if math.Abs(f[4]-1/2236.0679774997897) > 1e-18 {
		t.Errorf("inv_freq[4] = %g, want 1/sqrt(5e6)", f[4])
	}
	if c.RopeAttentionScale() != 1 {
		t.Errorf("attention scale %g, want 1", c.RopeAttentionScale())
	}
}

func TestInvFreqDefaultAndLinear(t *testing.T) {
	assertFreqs(t, ropeConfig(nil).InvFreq(), []float64{1, 0.1, 0.01, 0.001})
	c := ropeConfig(&RopeScaling{Type: "linear", Factor: 4})
	assertFreqs(t, c.InvFreq(), []float64{0.25, 0.025, 0.0025, 0.00025})
	if c.RopeAttentionScale() != 1 {
		t.Errorf("linear attention scale %g, want 1", c.RopeAttentionScale())
	}
}

func TestInvFreqLlama3(t *testing.T) {
	// orig 1000, low 1, high 4: low band edge wave 1000, high edge 250.
	// Waves 2*pi*10^i: 6.28 and 62.8 (< 250, kept), 628.3 (blended),
	// 6283 (> 1000, divided by 8).
	// Blend at i=2: s = (1000/(2*pi*100) - 1)/3 = (10/(2*pi) - 1)/3
	// = 0.19718314363..., inv = 0.01*((1-s)/8 + s) = 0.0029753525...
	c := ropeConfig(&RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4,
		OriginalMaxPositionEmbeddings: 1000})
	s := (10/(2*math.Pi) - 1) / 3
	assertFreqs(t, c.InvFreq(), []float64{1, 0.1, 0.01 * ((1-s)/8 + s), 0.001 / 8})
	if math.Abs(0.01*((1-s)/8+s)-0.0029753525068) > 1e-12 {
		t.Errorf("hand value drifted: %.13g", 0.01*((1-s)/8+s))
	}
}

func TestInvFreqYarn(t *testing.T) {
	// dim 8, theta 1e4: corr(r) = 8*ln(orig/(2*pi*r))/(2*ln 1e4) = log10(orig/(2*pi*r)).
	// orig 4096: corr(32) = log10(20.37) = 1.309, corr(1) = log10(651.9) = 2.814,
	// so lo = 1, hi = 3 and ramp = 0, 0, 0.5, 1.
	// factor 4: inv = 1, 0.1, 0.01*(0.5/4 + 0.5) = 0.00625, 0.001/4.
	c := ropeConfig(&RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 4096})
	assertFreqs(t, c.InvFreq(), []float64{1, 0.1, 0.00625, 0.00025})
	// mscale(4, 1) = 0.1*ln 4 + 1 = 1.1386294361...
	if got, want := c.RopeAttentionScale(), 0.1*math.Log(4)+1; math.Abs(got-want) > 1e-15 || math.Abs(want-1.1386294361) > 1e-10 {
		t.Errorf("attention scale %g, want %g", got, want)
	}

	// truncate=false keeps lo = log10(4096/(64*pi)), hi = log10(4096/(2*pi)):
	// ramp(2) = (2 - lo)/(hi - lo).
	c.RopeScaling.NoTruncate = true
	lo, hi := math.Log10(4096/(64*math.Pi)), math.Log10(4096/(2*math.Pi))
	r2 := (2 - lo) / (hi - lo)
	assertFreqs(t, c.InvFreq(), []float64{1, 0.1, 0.01 * (r2/4 + (1 - r2)), 0.001 / 4})

	// Explicit attention_factor wins; mscale/mscale_all_dim give a ratio.
	c.RopeScaling.AttentionFactor = 0.5
	if got := c.RopeAttentionScale(); got != 0.5 {
		t.Errorf("explicit attention factor: got %g", got)
	}
	c.RopeScaling.AttentionFactor = 0
	c.RopeScaling.MScale, c.RopeScaling.MScaleAllDim = 1, 0.707
	if got, want := c.RopeAttentionScale(), (0.1*math.Log(4)+1)/(0.1*0.707*math.Log(4)+1); math.Abs(got-want) > 1e-15 {
		t.Errorf("mscale ratio: got %g, want %g", got, want)
	}

	// Custom betas: beta_fast 8, beta_slow 2 give corr = log10(4096/(16*pi))
	// = 1.911 -> lo 1, and log10(4096/(4*pi)) = 2.513 -> hi 3: same ramp.
	c.RopeScaling.NoTruncate = false
	c.RopeScaling.BetaFast, c.RopeScaling.BetaSlow = 8, 2
	assertFreqs(t, c.InvFreq(), []float64{1, 0.1, 0.00625, 0.00025})
}

func TestInvFreqFromParsedYarn(t *testing.T) {
	c, err := parseEdited(t, map[string]any{"head_dim": 8, "rope_theta": 10000, "max_position_embeddings": 16384,
		"rope_scaling": map[string]any{"type": "yarn", "factor": 4, "original_max_position_embeddings": 4096}})
	if err != nil {
		t.Fatal(err)
	}
	assertFreqs(t, c.InvFreq(), []float64{1, 0.1, 0.00625, 0.00025})
}

// The model's default frequencies are float32 libtorch arithmetic (HF's own),
// so they may differ from the float64 formula by an ulp but no more; scaled
// RoPE keeps the float64 values rounded once.
func TestModelInvFreq(t *testing.T) {
	if err := torch.Load(); err != nil {
		t.Fatal(err)
	}
	mini, err := LoadConfig("../testdata/minicpm5-2b-shape")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Config{mini, ropeConfig(nil), ropeConfig(&RopeScaling{Type: "linear", Factor: 4})} {
		inv := RopeFrequencies(c, torch.CPU)
		got := inv.Float32s()
		inv.Free()
		want := c.InvFreq()
		if len(got) != len(want) {
			t.Fatalf("%d frequencies, want %d", len(got), len(want))
		}
		for i, w := range want {
			w32 := float32(w)
			if c.RopeScaling != nil && got[i] != w32 {
				t.Errorf("scaled inv_freq[%d] = %g, want %g exactly", i, got[i], w32)
			}
			if ulp := math.Nextafter32(w32, float32(math.Inf(1))) - w32; math.Abs(float64(got[i]-w32)) > float64(ulp) {
				t.Errorf("theta %g: inv_freq[%d] = %.9g, more than an ulp from %.9g", c.RopeTheta, i, got[i], w32)
			}
		}
	}
}
