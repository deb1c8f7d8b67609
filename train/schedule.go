package train

import "math"

// LRAt is the learning rate of optimizer step s (0-based): a linear warm-up
// over warmup_steps (lr*(s+1)/warmup), then per lr_schedule
//
//	cosine:   min_lr + (lr-min_lr) * (1 + cos(pi * p)) / 2, p = (s-warmup)/(steps-warmup)
//	wsd:      lr until the last decay_frac of the steps, then linearly to min_lr
//	constant: lr
func (c *Config) LRAt(s int) float64 {
	if s < c.WarmupSteps {
		return c.LR * float64(s+1) / float64(c.WarmupSteps)
	}
	switch c.LRSchedule {
	case ScheduleCosine:
		span := c.Steps - c.WarmupSteps
		if span <= 1 {
			return c.LR
		}
		p := float64(s-c.WarmupSteps) / float64(span-1) // the last step reaches min_lr
		p = min(p, 1)
		return c.MinLR + (c.LR-c.MinLR)*(1+math.Cos(math.Pi*p))/2
	case ScheduleWSD:
		decay := int(math.Round(c.DecayFrac * float64(c.Steps)))
		start := c.Steps - decay
		if decay == 0 || s < start {
			return c.LR
		}
		p := float64(s-start+1) / float64(decay) // the last step reaches min_lr
		return c.LR + (c.MinLR-c.LR)*min(p, 1)
	}
	return c.LR
}

// BlockSizeAt is the block size of optimizer step s (0-based) by the
// piecewise-constant block_schedule.
func (c *Config) BlockSizeAt(s int) int {
	size := c.BlockSchedule[0].Size
	for _, st := range c.BlockSchedule {
		if st.Step <= s {
			size = st.Size
		}
	}
	return size
}

// FinalBlockSize is the block size in use at the last step: the one the
// exported model's dllm.json records.
func (c *Config) FinalBlockSize() int { return c.BlockSizeAt(c.Steps - 1) }

// annealP is the mdm attention annealing's probability that a non-causal
// pair may attend at step s: s/anneal_steps, capped at 1 (1 also without
// annealing).
func (c *Config) annealP(s int) float64 {
	if c.AnnealSteps <= 0 {
		return 1
	}
	return min(1, float64(s)/float64(c.AnnealSteps))
}
