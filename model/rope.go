package model

import (
	"encoding/json"
	"fmt"
	"math"
)

// RopeScaling is a non-default RoPE variant. Zero values mean "HF default"
// wherever HF treats a missing key and a falsy one alike.
type RopeScaling struct {
	// Type is "linear", "llama3" or "yarn".
	Type   string
	Factor float64
	// OriginalMaxPositionEmbeddings is the pre-extension context (llama3,
	// yarn); 0 means MaxPositionEmbeddings.
	OriginalMaxPositionEmbeddings int
	// LowFreqFactor and HighFreqFactor are llama3's band edges.
	LowFreqFactor, HighFreqFactor float64
	// AttentionFactor scales cos/sin in yarn; 0 derives it from Factor,
	// MScale and MScaleAllDim as HF does.
	AttentionFactor float64
	// BetaFast and BetaSlow bound yarn's ramp; 0 means 32 and 1.
	BetaFast, BetaSlow float64
	// MScale and MScaleAllDim are DeepSeek-style yarn attention-factor terms.
	MScale, MScaleAllDim float64
	// NoTruncate is HF's truncate=false: yarn's ramp ends are not rounded.
	NoTruncate bool
}

// ropeKeys are the rope_scaling / rope_parameters keys understood here. Any
// other key may change the maths (mrope_section, short_factor, ...), so it
// is an error rather than ignored.
var ropeKeys = map[string]bool{
	"rope_type": true, "type": true, "rope_theta": true, "factor": true,
	"original_max_position_embeddings": true, "low_freq_factor": true,
	"high_freq_factor": true, "attention_factor": true, "beta_fast": true,
	"beta_slow": true, "mscale": true, "mscale_all_dim": true, "truncate": true,
	"partial_rotary_factor": true,
}

// setRope follows transformers v5's standardize_rope_params: rope_scaling
// (v4 name) wins over rope_parameters (v5 name); rope_theta may sit inside
// the dict or at top level; "type" is the legacy name of "rope_type".
func (c *Config) setRope(r *rawConfig) error {
	raw := r.RopeScaling
	if isEmptyJSON(raw) {
		raw = r.RopeParameters
	}
	m := map[string]json.RawMessage{}
	if !isEmptyJSON(raw) {
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("config: rope_scaling must be an object: %w", err)
		}
	}
	for k, v := range m {
		if len(v) > 0 && v[0] == '{' {
			return fmt.Errorf("config: rope_parameters[%q] is per-layer-type RoPE, which is not supported", k)
		}
		if !ropeKeys[k] {
			return fmt.Errorf("config: rope_scaling.%s is not supported", k)
		}
	}
	num := func(key string) (float64, bool, error) {
		v, ok := m[key]
		if !ok || string(v) == "null" {
			return 0, false, nil
		}
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return 0, false, fmt.Errorf("config: rope_scaling.%s must be a number, got %s", key, v)
		}
		return f, true, nil
	}
	var err error
	get := func(key string, dst *float64, required bool) {
		if err != nil {
			return
		}
		v, ok, e := num(key)
		switch {
		case e != nil:
			err = e
		case ok:
			*dst = v
		case required:
			err = fmt.Errorf("config: rope_scaling type %q needs %s", c.ropeTypeOf(m), key)
		}
	}

	c.RopeTheta = 10000
	if r.RopeTheta != nil {
		c.RopeTheta = *r.RopeTheta
	}
	get("rope_theta", &c.RopeTheta, false)
	prf := 1.0
	get("partial_rotary_factor", &prf, false)
	if err != nil {
		return err
	}
	if prf != 1 {
		return fmt.Errorf("config: partial_rotary_factor=%g (partial rotary embedding) is not supported", prf)
	}

	typ := c.ropeTypeOf(m)
	if typ == "default" {
		return nil
	}
	s := &RopeScaling{Type: typ}
	// origMax is the pre-extension context of llama3 and yarn.
	origMax := func() float64 {
		var orig float64
		get("original_max_position_embeddings", &orig, false)
		if r.OrigMaxPos != nil {
			// Phi3-style top-level key: v5 gives it priority over the dict.
			orig = float64(*r.OrigMaxPos)
		}
		if orig == 0 {
			orig = float64(c.MaxPositionEmbeddings)
		}
		if err == nil && (orig != math.Trunc(orig) || orig < 1 || orig > math.MaxInt32) {
			err = fmt.Errorf("config: rope_scaling.original_max_position_embeddings=%g is not a positive integer", orig)
		}
		return orig
	}
	switch typ {
	case "linear":
		get("factor", &s.Factor, true)
	case "llama3":
		s.OriginalMaxPositionEmbeddings = int(origMax())
		get("factor", &s.Factor, true)
		get("low_freq_factor", &s.LowFreqFactor, true)
		get("high_freq_factor", &s.HighFreqFactor, true)
	case "yarn":
		orig := origMax()
		s.OriginalMaxPositionEmbeddings = int(orig)
		s.Factor = float64(c.MaxPositionEmbeddings) / orig // HF when factor is null
		get("factor", &s.Factor, false)
		get("attention_factor", &s.AttentionFactor, false)
		get("beta_fast", &s.BetaFast, false)
		get("beta_slow", &s.BetaSlow, false)
		get("mscale", &s.MScale, false)
		get("mscale_all_dim", &s.MScaleAllDim, false)
		if v, ok := m["truncate"]; ok && string(v) != "null" {
			var t bool
			if e := json.Unmarshal(v, &t); e != nil {
				return fmt.Errorf("config: rope_scaling.truncate must be a bool, got %s", v)
			}
			s.NoTruncate = !t
		}
	default:
		return fmt.Errorf("config: rope_scaling type %q is not supported (want default, linear, llama3 or yarn)", typ)
	}
	if err != nil {
		return err
	}
	c.RopeScaling = s
	return nil
}

func (c *Config) ropeTypeOf(m map[string]json.RawMessage) string {
	for _, k := range []string{"rope_type", "type"} {
		var s string
		if v, ok := m[k]; ok && json.Unmarshal(v, &s) == nil && s != "" {
			return s
		}
	}
	return "default"
}

func isEmptyJSON(raw json.RawMessage) bool {
	s := string(raw)
	return s == "" || s == "null" || s == "{}"
}

func finitePos(v float64) bool { return v > 0 && !math.IsInf(v, 0) }

func (c *Config) validateRope() error {
	// theta <= 1 would make every frequency 1 or rise with the dimension.
	if !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("config: rope_theta=%g must be a finite number above 1", c.RopeTheta)
	}
	s := c.RopeScaling
	if s == nil {
		return nil
	}
	if !finitePos(s.Factor) {
		return fmt.Errorf("config: rope_scaling.factor=%g must be positive", s.Factor)
	}
	switch s.Type {
	case "linear":
	case "llama3":
		if !finitePos(s.LowFreqFactor) || !(s.HighFreqFactor > s.LowFreqFactor) || math.IsInf(s.HighFreqFactor, 0) {
			return fmt.Errorf("config: rope_scaling needs 0 < low_freq_factor (%g) < high_freq_factor (%g)",
				s.LowFreqFactor, s.HighFreqFactor)
		}
		if s.OriginalMaxPositionEmbeddings < 0 {
			return fmt.Errorf("config: rope_scaling.original_max_position_embeddings=%d is negative", s.OriginalMaxPositionEmbeddings)
		}
	case "yarn":
		for _, v := range []struct {
			name string
			v    float64
		}{{"attention_factor", s.AttentionFactor}, {"beta_fast", s.BetaFast}, {"beta_slow", s.BetaSlow},
			{"mscale", s.MScale}, {"mscale_all_dim", s.MScaleAllDim}} {
			if v.v < 0 || math.IsInf(v.v, 0) || math.IsNaN(v.v) {
				return fmt.Errorf("config: rope_scaling.%s=%g must be finite and non-negative", v.name, v.v)
			}
		}
		if s.OriginalMaxPositionEmbeddings < 0 {
			return fmt.Errorf("config: rope_scaling.original_max_position_embeddings=%d is negative", s.OriginalMaxPositionEmbeddings)
		}
	default:
		return fmt.Errorf("config: rope_scaling type %q is not supported (want default, linear, llama3 or yarn)", s.Type)
	}
	return nil
}

// InvFreq returns the head_dim/2 RoPE inverse frequencies, following
// transformers' modeling_rope_utils (v5): _compute_default_rope_parameters,
// _compute_linear_scaling_rope_parameters, _compute_llama3_parameters and
// _compute_yarn_parameters. HF evaluates them in float32; these are the same
// formulas in float64, so they agree to float32 rounding.
func (c *Config) InvFreq() []float64 {
	dim := c.HeadDim
	base := make([]float64, dim/2)
	for i := range base {
		base[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(dim))
	}
	s := c.RopeScaling
	if s == nil {
		return base
	}
	switch s.Type {
	case "linear":
		// Dividing frequencies by factor is dividing positions by it.
		for i := range base {
			base[i] /= s.Factor
		}
	case "llama3":
		orig := float64(c.origMaxPos())
		lowWave := orig / s.LowFreqFactor
		highWave := orig / s.HighFreqFactor
		for i, f := range base {
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave: // high frequencies: unchanged
			case wave > lowWave: // low frequencies: interpolated
				base[i] = f / s.Factor
			default: // in between: blend the two
				smooth := (orig/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				base[i] = (1-smooth)*f/s.Factor + smooth*f
			}
		}
	case "yarn":
		low, high := c.yarnRange()
		if low == high {
			high += 0.001 // HF's guard against dividing by zero
		}
		for i, f := range base {
			// ramp is 0 where dimensions rotate fast (keep f, extrapolate)
			// and 1 where they rotate slowly (interpolate f/factor).
			ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
			base[i] = f/s.Factor*ramp + f*(1-ramp)
		}
	}
	return base
}

func (c *Config) origMaxPos() int {
	if s := c.RopeScaling; s != nil && s.OriginalMaxPositionEmbeddings > 0 {
		return s.OriginalMaxPositionEmbeddings
	}
	return c.MaxPositionEmbeddings
}

// yarnRange is HF's find_correction_range: the dimensions that complete
// beta_fast and beta_slow rotations over the original context.
func (c *Config) yarnRange() (low, high float64) {
	s := c.RopeScaling
	betaFast, betaSlow := s.BetaFast, s.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	dim := float64(c.HeadDim)
	orig := float64(c.origMaxPos())
	corrDim := func(rot float64) float64 {
		return dim * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(c.RopeTheta))
	}
	low, high = corrDim(betaFast), corrDim(betaSlow)
	if !s.NoTruncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	return math.Max(low, 0), math.Min(high, dim-1)
}

// RopeAttentionScale is the factor HF multiplies cos and sin by (its
// "attention_factor" / mscale): 1 except for yarn.
func (c *Config) RopeAttentionScale() float64 {
	s := c.RopeScaling
	if s == nil || s.Type != "yarn" {
		return 1
	}
	if s.AttentionFactor != 0 {
		return s.AttentionFactor
	}
	getMScale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	if s.MScale != 0 && s.MScaleAllDim != 0 {
		return getMScale(s.Factor, s.MScale) / getMScale(s.Factor, s.MScaleAllDim)
	}
	return getMScale(s.Factor, 1)
}
