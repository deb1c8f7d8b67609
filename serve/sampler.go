package serve

import (
	"context"
	"errors"
	"fmt"

	"dllm/diffusion"
	"dllm/model"
)

// newEngine wraps the block-diffusion sampler.
func newEngine(m *model.Model, s *diffusion.Settings) samplerEngine {
	return samplerEngine{diffusion.NewSampler(m, s)}
}

// samplerEngine marks the sampler's request errors for the server, which
// answers them with 400.
type samplerEngine struct{ s *diffusion.Sampler }

func (e samplerEngine) Generate(ctx context.Context, prompt []int64, o diffusion.Options, onBlock diffusion.BlockFunc) (*diffusion.Result, error) {
	res, err := e.s.Generate(ctx, prompt, o, onBlock)
	switch {
	case errors.Is(err, diffusion.ErrContextTooLong):
		err = fmt.Errorf("%w: %w", errContextTooLong, err)
	case errors.Is(err, diffusion.ErrInvalidRequest):
		err = fmt.Errorf("%w: %w", errInvalidRequest, err)
	}
	return res, err
}
