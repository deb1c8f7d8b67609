package serve

import (
	"context"
	"errors"
	"fmt"

	"dllm/diffusion"
)

// generator is a diffusion engine: the single-stream Sampler or the
// Batcher.
type generator interface {
	Generate(ctx context.Context, prompt []int64, o diffusion.Options, onBlock diffusion.BlockFunc) (*diffusion.Result, error)
	Defaults() diffusion.Options
}

// diffusionEngine marks a diffusion engine's request errors for the server,
// which answers them with 400.
type diffusionEngine struct{ g generator }

func (e diffusionEngine) Generate(ctx context.Context, prompt []int64, o diffusion.Options, onBlock diffusion.BlockFunc) (*diffusion.Result, error) {
	res, err := e.g.Generate(ctx, prompt, o, onBlock)
	switch {
	case errors.Is(err, diffusion.ErrContextTooLong):
		err = fmt.Errorf("%w: %w", errContextTooLong, err)
	case errors.Is(err, diffusion.ErrInvalidRequest):
		err = fmt.Errorf("%w: %w", errInvalidRequest, err)
	}
	return res, err
}
