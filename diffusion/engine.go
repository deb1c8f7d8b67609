package diffusion

import (
	"fmt"
	"time"

	"dllm/model"
	"dllm/torch"
)

// engine runs one generation's forwards over its KV cache.
type engine interface {
	// forward runs ids after the committed context and returns the logits
	// of the last rows positions (rows, V), none for rows 0. The first
	// causal ids attend causally (clean text); the rest see all the ids
	// and the context (a block being denoised). Their keys and values are
	// cached, but only commit makes them context. spec, when not nil,
	// says which rows the generation will pick next and how: an engine
	// that batches may pick them beside other sequences' (logitRows.picked).
	forward(ids []int64, causal, rows int, spec *pickSpec) (logitRows, error)
	commit(n int64) error
	// next queues, where the engine can, the next denoising forward of a
	// fixed-commit block of n positions, its canvas made on the device
	// from the last forward's and that forward's picks (see
	// model.Decoder.ForwardNext); ok false: nothing was queued.
	next(n int, picks *torch.Tensor, mask int64, k int, shift bool) (logits logitRows, ok bool, err error)
	// room is how many positions the generation may still add.
	room() int64
	free()
}

// eagerEngine is Model.Forward over a KVCache: one shim call per sublayer.
type eagerEngine struct {
	m     *model.Model
	cache *model.KVCache
}

func (e *eagerEngine) forward(ids []int64, causal, rows int, _ *pickSpec) (logitRows, error) {
	x := e.device(torch.FromSlice(ids, 1, int64(len(ids))))
	defer x.Free()
	o := model.ForwardOpts{Attention: model.Attention{Kind: model.Bidirectional}, Cache: e.cache}
	T, S := int64(len(ids)), e.cache.Len+int64(len(ids))
	switch {
	case causal >= len(ids):
		o.Attention.Kind = model.Causal
	case causal > 0:
		// Mixed: the first causal rows causal, the rest see everything.
		allowed := make([]bool, T*S)
		for q := range T {
			for k := range S {
				allowed[q*S+k] = q >= int64(causal) || k <= e.cache.Len+q
			}
		}
		o.Mask = e.device(torch.FromSlice(allowed, 1, 1, T, S))
		defer o.Mask.Free()
	}
	if rows == 0 {
		// The head is the largest matmul; a cache-only pass skips it.
		h, err := e.m.Hidden(x, o)
		h.Free()
		return logitRows{}, err
	}
	o.LastN = rows
	logits, err := e.m.Forward(x, o) // (1, rows, V)
	if err != nil {
		return logitRows{}, err
	}
	defer logits.Free()
	return logitRows{t: logits.Reshape(int64(rows), -1)}, nil
}

// device moves a CPU tensor to the model's device.
func (e *eagerEngine) device(t *torch.Tensor) *torch.Tensor {
	if !e.m.Device.CUDA {
		return t
	}
	defer t.Free()
	return t.To(t.DType(), e.m.Device)
}

func (e *eagerEngine) next(int, *torch.Tensor, int64, int, bool) (logitRows, bool, error) {
	return logitRows{}, false, nil
}

func (e *eagerEngine) commit(n int64) error { return e.cache.Commit(n) }
func (e *eagerEngine) room() int64          { return e.cache.Max - e.cache.Len }
func (e *eagerEngine) free()                { e.cache.Free() }

// fastEngine is the model's Decoder, kept by the Sampler across
// generations so that its KV cache and CUDA graphs are made once.
type fastEngine struct {
	d       *model.Decoder
	limit   int64 // the generation's positions
	noAhead bool  // never queue a step ahead (Sampler.noAhead)
}

func (e *fastEngine) forward(ids []int64, causal, rows int, _ *pickSpec) (logitRows, error) {
	t, err := e.d.Forward(ids, causal, rows)
	return logitRows{t: t}, err
}

func (e *fastEngine) next(n int, picks *torch.Tensor, mask int64, k int, shift bool) (logitRows, bool, error) {
	if e.noAhead {
		return logitRows{}, false, nil
	}
	t, ok, err := e.d.ForwardNext(n, picks, mask, k, shift, n)
	return logitRows{t: t}, ok, err
}

func (e *fastEngine) commit(n int64) error { return e.d.Commit(n) }
func (e *fastEngine) room() int64          { return e.limit - e.d.Len }
func (e *fastEngine) free()                {}

// minDecoderContext is the smallest KV cache a Sampler's decoder gets; it
// grows in powers of two, dropping its graphs each time.
const minDecoderContext = 4096

// engine returns the engine for a generation of p: the decoder unless
// s.Eager is set.
func (s *Sampler) engine(p plan) (engine, error) {
	if s.Eager {
		cache, err := s.model.NewCache(1, p.cacheLen)
		if err != nil {
			return nil, err
		}
		return &eagerEngine{m: s.model, cache: cache}, nil
	}
	if s.dec == nil || s.dec.Max < int64(p.cacheLen) {
		n := minDecoderContext
		for n < p.cacheLen {
			n *= 2
		}
		n = min(n, max(p.cacheLen, s.model.Config.MaxPositionEmbeddings))
		s.dec.Free()
		s.dec = nil
		// Graphs for a block and for a committed block with the next one.
		d, err := s.model.NewDecoder(n, 2*max(p.block, 1))
		if err != nil {
			return nil, err
		}
		s.dec = d
	}
	s.dec.Reset()
	return &fastEngine{d: s.dec, limit: int64(p.cacheLen), noAhead: s.noAhead}, nil
}

// Reserve makes the decoder for generations of up to n positions in blocks
// of block tokens now, its KV cache and, on a GPU, the CUDA graphs of the
// block steps over long contexts (model.Decoder.Prepare), so that no
// generation pays for them on its way: a server calls it while loading.
// The eager engine has nothing to make.
func (s *Sampler) Reserve(n, block int) error {
	if s.Eager {
		return nil
	}
	if n < 1 || block < 1 {
		return fmt.Errorf("diffusion: cannot reserve %d positions in blocks of %d", n, block)
	}
	if _, err := s.engine(plan{cacheLen: n, block: block}); err != nil {
		return err
	}
	_, err := s.dec.Prepare(block, n)
	return err
}

// HostTime is the host time spent inside the decoder's forwards so far
// (model.Decoder.Host): on a GPU, enqueueing them. It is 0 on the eager
// engine and starts again when a longer generation makes a new decoder.
func (s *Sampler) HostTime() time.Duration {
	if s.dec == nil {
		return 0
	}
	return s.dec.Host
}

// Close releases the sampler's decoder (its KV cache and CUDA graphs).
func (s *Sampler) Close() {
	s.dec.Free()
	s.dec = nil
}
