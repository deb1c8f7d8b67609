package diffusion

import "fmt"

// The ranges of the generation settings, each checked here alone: by
// dllm.json's Settings.Validate, by the sampler for Options, and by serve
// for a request's fields (which adds the field's name to a 400). NaN fails
// every comparison, so each check accepts only what is valid.
const (
	// MaxTemperature is OpenAI's upper bound.
	MaxTemperature = 2
	// MaxCommitCount bounds tokens_per_step, max_commit and min_commit:
	// any count from the block size up already commits a whole block.
	MaxCommitCount = 4096
	// MaxErrorBudget bounds error_budget: a block's worth of certain
	// errors already commits everything.
	MaxErrorBudget = 4096
)

// CheckThreshold: a denoising threshold is in (0, 1].
func CheckThreshold(v float64) error {
	if !(v > 0 && v <= 1) {
		return fmt.Errorf("threshold must be in (0, 1], got %v", v)
	}
	return nil
}

// CheckTopP: a nucleus mass is in (0, 1].
func CheckTopP(v float64) error {
	if !(v > 0 && v <= 1) {
		return fmt.Errorf("top_p must be in (0, 1], got %v", v)
	}
	return nil
}

// CheckTemperature: a temperature is in [0, MaxTemperature].
func CheckTemperature(v float64) error {
	if !(v >= 0 && v <= MaxTemperature) {
		return fmt.Errorf("temperature must be between 0 and %d, got %v", MaxTemperature, v)
	}
	return nil
}

// CheckErrorBudget: an error budget is in [0, MaxErrorBudget].
func CheckErrorBudget(v float64) error {
	if !(v >= 0 && v <= MaxErrorBudget) {
		return fmt.Errorf("error_budget must be between 0 and %d, got %v", MaxErrorBudget, v)
	}
	return nil
}

// CheckCommitCount: a commit count named name (tokens_per_step,
// max_commit, min_commit) is in [least, MaxCommitCount].
func CheckCommitCount(name string, k int64, least int64) error {
	if k < least || k > MaxCommitCount {
		return fmt.Errorf("%s must be between %d and %d, got %d", name, least, MaxCommitCount, k)
	}
	return nil
}

// CheckCommitBounds: a minimum commit count is not above a maximum (0: no
// maximum).
func CheckCommitBounds(minCommit, maxCommit int64) error {
	if maxCommit > 0 && minCommit > maxCommit {
		return fmt.Errorf("min_commit %d is above max_commit %d", minCommit, maxCommit)
	}
	return nil
}
