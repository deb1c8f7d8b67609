package diffusion

import (
	"context"
	"os"
	"slices"
	"testing"

	"dllm/model"
	"dllm/torch"
)

// On a GPU (skipped elsewhere): a fixed-commit generation whose steps are
// queued ahead of their ids (denoise) gives the tokens and step counts of
// the one that is not ($DLLM_AHEAD=0), also when a stop token ends a block
// early and the queued step is dropped; the decoder then serves the next
// generation as before. Random weights of MiniCPM5-2B's shape.
//
//	go test -c -o diffusion.test ./diffusion && ./diffusion.test -test.run CUDA -test.v
func TestSamplerCUDAAhead(t *testing.T) {
	if err := torch.Load(); err != nil || !torch.CUDAAvailable() {
		t.Skip("no CUDA device")
	}
	cfg, err := model.LoadConfig("../testdata/minicpm5-2b-shape")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.NewRandom(cfg, model.LoadOptions{Device: torch.CUDA(0), DType: torch.BFloat16}, 3, 0.02)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	st := &Settings{FormatVersion: FormatVersion, MaskTokenID: cfg.VocabSize - 1, MaskToken: DefaultMaskToken,
		BlockSize: 32, Attention: AttentionBlock, Shift: true, Generation: DefaultGeneration(32)}
	prompt := make([]int64, 1100) // past $DLLM_ATTN_CUDNN's 1024: the cuDNN path's graphs
	for i := range prompt {
		prompt[i] = int64(i*7919) % int64(cfg.VocabSize-1)
	}
	gen := func(ahead bool, stop []int64) *Result {
		t.Helper()
		if !ahead {
			os.Setenv("DLLM_AHEAD", "0")
			defer os.Unsetenv("DLLM_AHEAD")
		}
		s := NewSampler(m, st)
		defer s.Close()
		o := Options{BlockSize: 32, FixedCommit: 3, MaxNewTokens: 4 * 32, ContextLimit: len(prompt) + 4*32, TopP: 1,
			StopIDs: stop}
		res, err := s.Generate(context.Background(), prompt, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The decoder after a dropped step: one more generation.
		again, err := s.Generate(context.Background(), prompt, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(again.IDs, res.IDs) {
			t.Errorf("ahead %v, stop %v: a second generation gave %v, the first %v", ahead, stop, again.IDs, res.IDs)
		}
		return res
	}
	want := gen(false, nil)
	got := gen(true, nil)
	if !slices.Equal(got.IDs, want.IDs) || got.Steps != want.Steps {
		t.Fatalf("queued ahead: %d steps, %v; not: %d steps, %v", got.Steps, got.IDs, want.Steps, want.IDs)
	}
	// A stop token in the third block's middle, if the output has one there.
	stop := []int64{want.IDs[2*32+10]}
	if i := slices.Index(want.IDs, stop[0]); i < 2*32 {
		t.Logf("token %d first comes at %d, not in the third block", stop[0], i)
	}
	want, got = gen(false, stop), gen(true, stop)
	if !slices.Equal(got.IDs, want.IDs) || got.Steps != want.Steps || got.FinishReason != "stop" {
		t.Fatalf("with stop %v: queued ahead %s after %d steps, %v; not: %s after %d steps, %v", stop,
			got.FinishReason, got.Steps, got.IDs, want.FinishReason, want.Steps, want.IDs)
	}
	t.Logf("%d steps, %d tokens; with a stop token: %d steps, %d tokens", got.Steps, len(got.IDs), want.Steps, len(want.IDs))
}
