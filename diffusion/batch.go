package diffusion

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"dllm/model"
	"dllm/torch"
)

// Batcher generates for many callers at once over one model (continuous
// batching, docs/design.md): each Generate is a sequence in one slot of a
// model.BatchDecoder's KV cache, and each step is one forward of every
// sequence waiting for one, each at its own block, context length and
// options. A sequence joins at the step after it gets a slot (its prompt
// in chunks of PrefillChunk, beside the others' blocks) and leaves the
// moment it finishes. A sequence's tokens are those it gets from a
// Sampler alone (greedy, or with the same seed), up to floating point.
// Safe for concurrent use.
type Batcher struct {
	model    *model.Model
	settings *Settings
	dec      *model.BatchDecoder
	cfg      BatchConfig

	slots  *slotPool
	events chan batchEvent // to the loop, which owns the step's state
	quit   chan struct{}
	done   chan struct{} // closed when the loop has returned
	once   sync.Once

	steps, seqForwards, gatherTimeouts, stepNanos, ahead atomic.Int64 // BatchStats

	// noAhead never queues a lone sequence's step ahead (as Sampler.noAhead).
	noAhead bool
}

// BatchStats count a Batcher's work so far.
type BatchStats struct {
	// Steps is the batched forwards run; SeqForwards the sequences' forwards
	// they held, so SeqForwards/Steps is the mean batch size.
	Steps, SeqForwards int64
	// GatherTimeouts counts the steps that ran without a sequence of the
	// batch after waiting maxGather for it.
	GatherTimeouts int64
	// Ahead counts the steps a sequence alone queued before the host had
	// read its last picks (engine.next; the single-stream decoder's
	// ForwardNext), which Steps counts too.
	Ahead int64
	// StepTime is the time inside the steps: the forwards and, for
	// greedy sequences of a step of several, their picks on the host, so
	// that on a GPU such a step's time includes the device's work (a lone
	// sequence's forward, and a step of sampling sequences, are only
	// queued). What the wall time of a run of greedy steps has beyond it
	// is the host's turn between steps, when the device waits.
	StepTime time.Duration
}

// Stats returns the counts so far.
func (b *Batcher) Stats() BatchStats {
	return BatchStats{Steps: b.steps.Load(), SeqForwards: b.seqForwards.Load(), GatherTimeouts: b.gatherTimeouts.Load(),
		Ahead: b.ahead.Load(), StepTime: time.Duration(b.stepNanos.Load())}
}

// BatchConfig sizes a Batcher.
type BatchConfig struct {
	// Seqs is how many sequences run at once (slots of the KV cache).
	Seqs int
	// Context is the positions of each slot: prompt plus generated tokens
	// of one sequence.
	Context int
	// StepTokens caps the tokens of one step's forward (vLLM's
	// max_num_batched_tokens); a step always runs at least one sequence's
	// request. 0 = 8192.
	StepTokens int
	// PrefillChunk is the prompt tokens a sequence sends in one step.
	// 0 = 512.
	PrefillChunk int
}

// batchEvent is what the loop hears from the sequences: one joins, one
// leaves, one is away in its caller's onBlock (which may write to a slow
// client: the batch does not wait for it) or back, or one asks for a
// forward, or for its next step queued ahead.
type batchEvent struct {
	join, leave, away, back bool
	req                     *batchReq
	next                    *batchNext
}

// batchNext asks to queue a sequence's next fixed-commit step ahead
// (engine.next), which only a sequence alone in slot 0 may: the
// single-stream decoder's ForwardNext, whose inputs are its last forward's.
type batchNext struct {
	slot, n, k int
	pos, mask  int64
	picks      *torch.Tensor
	shift      bool
	out        chan batchOut
}

// batchReq is one sequence's forward: its tokens at its slot's positions,
// answered on out. A greedy sequence's rows come with their picks
// (greedy: the mask token that is never picked), a sampling one's with
// the draw of spec when it has one.
type batchReq struct {
	seq    torch.BatchSeq
	greedy bool
	mask   int64
	spec   *pickSpec
	out    chan batchOut
}

type batchOut struct {
	logits logitRows // (Rows, V), or none
	ok     bool      // a batchNext's: its step was queued
	err    error
}

// NewBatcher makes the KV cache for c.Seqs sequences of c.Context
// positions and starts the loop that runs their steps; Close stops it.
func NewBatcher(m *model.Model, s *Settings, c BatchConfig) (*Batcher, error) {
	if c.Seqs < 1 || c.Context < 2 {
		return nil, fmt.Errorf("diffusion: a batch of %d sequences of %d positions", c.Seqs, c.Context)
	}
	if c.StepTokens == 0 {
		c.StepTokens = 8192
	}
	if c.PrefillChunk == 0 {
		c.PrefillChunk = 512
	}
	if c.StepTokens < 1 || c.PrefillChunk < 1 {
		return nil, fmt.Errorf("diffusion: step tokens %d and prefill chunk %d must be positive", c.StepTokens, c.PrefillChunk)
	}
	var dec *model.BatchDecoder
	var err error
	// Graphs for a block and for a committed block with the next one, as
	// the Sampler's decoder has: for a sequence alone (step).
	torch.NoGrad(func() { dec, err = m.NewBatchDecoder(c.Context, c.Seqs, 2*max(s.BlockSize, 1)) })
	if err != nil {
		return nil, err
	}
	b := &Batcher{
		model: m, settings: s, dec: dec, cfg: c,
		slots: newSlotPool(c.Seqs),
		// Buffered: a sequence hands its forward over without waiting for
		// the loop to take it, so that after a step the sequences run their
		// turns at once, not one rendezvous with the loop after another
		// (four events a sequence: a step's request, a callback's away and
		// back, and join or leave).
		events: make(chan batchEvent, 4*c.Seqs),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go b.loop()
	return b, nil
}

// Defaults are the options dllm.json asks for that a zero value cannot
// express (Sampler.Defaults).
func (b *Batcher) Defaults() Options {
	return defaults(b.settings)
}

// errBatcherClosed answers the sequences of a closed Batcher.
var errBatcherClosed = errors.New("diffusion: the batcher is closed")

// Generate is Sampler.Generate as one sequence of the batch: it waits for
// a free slot (or ctx), then generates beside the other sequences.
func (b *Batcher) Generate(ctx context.Context, prompt []int64, o Options, onBlock BlockFunc) (res *Result, err error) {
	start := time.Now()
	p, err := resolve(b.model, b.settings, prompt, o)
	if err != nil {
		return nil, err
	}
	if p.cacheLen > b.cfg.Context {
		return nil, fmt.Errorf("diffusion: %w: %d prompt tokens and %d to generate need %d positions; a sequence has %d",
			ErrContextTooLong, len(prompt), p.maxNew, p.cacheLen, b.cfg.Context)
	}
	p.chunk = b.cfg.PrefillChunk
	slot, err := b.slots.get(ctx, b.quit)
	if err != nil {
		return nil, err
	}
	eng := &batchEngine{b: b, slot: slot, limit: int64(p.cacheLen), greedy: p.temperature == 0, mask: p.mask}
	if !b.send(batchEvent{join: true}) {
		b.slots.put(slot)
		return nil, errBatcherClosed
	}
	if onBlock != nil {
		caller := onBlock
		onBlock = func(bl Block) (bool, error) {
			// A callback still running after awayAfter (a server writing
			// to a stalled client) takes the sequence out of what the
			// next step waits for until it returns; a quick one does not
			// (its away and back would cost the loop two events and could
			// start a step without it).
			var mu sync.Mutex
			away, returned := false, false
			t := time.AfterFunc(awayAfter, func() {
				mu.Lock()
				defer mu.Unlock()
				if !returned {
					away = b.send(batchEvent{away: true})
				}
			})
			defer func() {
				t.Stop()
				mu.Lock()
				returned = true
				mu.Unlock()
				if away {
					b.send(batchEvent{back: true})
				}
			}()
			return caller(bl)
		}
	}
	torch.NoGrad(func() {
		defer torch.Recover(&err)
		var g *generation
		if g, err = newGeneration(b.model, eng, p); err != nil {
			return
		}
		defer g.free()
		res, err = g.run(ctx, prompt, onBlock, start)
	})
	return res, err
}

// send hands e to the loop; false once the batcher is closed.
func (b *Batcher) send(e batchEvent) bool {
	select {
	case b.events <- e:
		return true
	case <-b.quit:
		return false
	}
}

// Reserve makes, on a GPU, the CUDA graphs of a lone sequence's block
// steps over the whole context now (model.BatchDecoder.Prepare), as
// Sampler.Reserve does for its decoder: a server calls it while loading,
// before any generation.
func (b *Batcher) Reserve(block int) error {
	var err error
	torch.NoGrad(func() { _, err = b.dec.Prepare(block) })
	return err
}

// Close stops the loop, fails the sequences still running and frees the
// KV cache.
func (b *Batcher) Close() {
	b.once.Do(func() {
		close(b.quit)
		<-b.done
		b.dec.Free()
	})
}

// loop runs the steps. A step runs once every sequence in the batch waits
// for a forward, but for those away in their caller's onBlock: between two
// forwards a sequence only reads its picks and updates its canvas, so the
// wait is short. One that takes longer is not waited for past maxGather:
// the others step without it.
func (b *Batcher) loop() {
	defer close(b.done)
	torch.NoGrad(func() {
		active := 0
		var waiting []*batchReq
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		var gathering bool
		for {
			// 1. Hear from the sequences until every one in the batch waits
			//    (or the oldest request has waited maxGather).
			ready := len(waiting) > 0 && len(waiting) >= active
			if !ready {
				if len(waiting) > 0 && !gathering {
					timer.Reset(maxGather)
					gathering = true
				}
				select {
				case e := <-b.events:
					switch {
					case e.join, e.back:
						active++
					case e.leave, e.away:
						active--
					case e.next != nil:
						b.stepAhead(e.next, active == 1 && len(waiting) == 0)
					default:
						waiting = append(waiting, e.req)
					}
					continue
				case <-timer.C:
					gathering = false
					b.gatherTimeouts.Add(1)
				case <-b.quit:
					for _, r := range waiting {
						r.out <- batchOut{err: errBatcherClosed}
					}
					return
				}
			}
			if gathering {
				timer.Stop()
				gathering = false
			}
			// 2. One forward of the waiting requests, first come first
			//    served, within the step's token budget.
			n, tokens := 0, 0
			for n < len(waiting) && (n == 0 || tokens+len(waiting[n].seq.IDs) <= b.cfg.StepTokens) {
				tokens += len(waiting[n].seq.IDs)
				n++
			}
			step := waiting[:n]
			b.step(step)
			waiting = append(waiting[:0:0], waiting[n:]...)
		}
	})
}

// maxGather is how long a step waits for a sequence that is not yet
// waiting for it, once another is.
const maxGather = 5 * time.Millisecond

// awayAfter is how long a sequence's caller may hold its block callback
// before the steps stop waiting for the sequence (Batcher.Generate).
const awayAfter = 500 * time.Microsecond

// step runs one forward of reqs and hands each its logit rows, with their
// picks: the greedy picks of every row of the step in one kernel, the
// draws of sampling sequences that draw alike in one pass (picker.sample,
// each sequence's noise from its own generator as alone), and one copy to
// the host for all, where a pick each would cost a sequence its kernels
// and a wait of its own and the batch those of all of them in turn. A
// sequence alone in slot 0 (the one a lone user gets: slotPool) takes the
// single-stream decoder's faster path.
func (b *Batcher) step(reqs []*batchReq) {
	start := time.Now()
	defer func() { b.stepNanos.Add(int64(time.Since(start))) }()
	seqs := make([]torch.BatchSeq, len(reqs))
	offs := make([]int64, len(reqs)) // each request's first row of the logits
	for i, r := range reqs {
		seqs[i] = r.seq
		if i > 0 {
			offs[i] = offs[i-1] + int64(reqs[i-1].seq.Rows)
		}
	}
	b.steps.Add(1)
	b.seqForwards.Add(int64(len(reqs)))
	var logits *torch.Tensor // (sum of Rows, V)
	var err error
	if len(seqs) == 1 && seqs[0].Slot == 0 {
		logits, err = b.dec.ForwardOne(seqs[0])
	} else {
		logits, err = b.dec.Forward(seqs)
	}
	all := logitRows{t: logits}
	var drawn []*picks // a sampling request's draw, by request
	if err == nil && len(reqs) > 1 {
		err = torch.Try(func() { drawn = b.pickAll(reqs, logits, offs, &all, sampleBytes) })
	}
	if err != nil {
		for _, r := range reqs {
			r.out <- batchOut{err: err}
		}
		logits.Free()
		return
	}
	for i, r := range reqs {
		var l logitRows
		if r.seq.Rows > 0 {
			l = all.narrow(offs[i], int64(r.seq.Rows))
			if !r.greedy {
				l.tok, l.conf = nil, nil
			}
		}
		if drawn != nil {
			l.picked = drawn[i]
		}
		r.out <- batchOut{logits: l}
	}
	logits.Free()
}

// sampleBytes bounds a pass of the batch's sampling draws (pickAll): its
// float32 (rows, V) temporaries, of which picker.sample holds about four
// at once, plus the noise. 64 sequences' 32-row blocks over a 130k
// vocabulary are ~1 GB a temporary in one pass, which the memory left
// beside a full KV cache (3 GiB) does not hold.
const sampleBytes = 256 << 20

// pickAll makes step's picks of logits (the rows of reqs one after
// another, request i's from offs[i]): every row's greedy pick into all
// when a request is greedy, and the draws of the sampling requests with a
// pickSpec, which it returns by request (nil where none), all through one
// copy to the host. Requests that draw alike are drawn together in passes
// of whole requests whose float32 rows take up to passBytes (at least one
// request each).
func (b *Batcher) pickAll(reqs []*batchReq, logits *torch.Tensor, offs []int64, all *logitRows, passBytes int64) []*picks {
	var tmp []*torch.Tensor
	keep := func(t *torch.Tensor) *torch.Tensor { tmp = append(tmp, t); return t }
	defer func() { torch.Free(tmp...) }()
	// 1. The parts to copy: the greedy picks of all rows, then each group
	//    of sampling requests' draws, (2 n) float64 each.
	var parts []*torch.Tensor
	var sizes []int // rows of each part
	greedy := slices.IndexFunc(reqs, func(r *batchReq) bool { return r.greedy && r.seq.Rows > 0 })
	if greedy >= 0 {
		parts = append(parts, keep(torch.PickGreedy(logits, reqs[greedy].mask)))
		sizes = append(sizes, int(logits.Size(0)))
	}
	var groups [][]int // sampling requests that draw alike
	for i, r := range reqs {
		if r.spec == nil || r.spec.pick.temperature == 0 || r.seq.Rows == 0 {
			continue
		}
		j := slices.IndexFunc(groups, func(g []int) bool { return reqs[g[0]].spec.pick.samples(r.spec.pick) })
		if j < 0 {
			groups = append(groups, nil)
			j = len(groups) - 1
		}
		groups[j] = append(groups[j], i)
	}
	if len(groups) > 0 {
		maxRows := int(max(1, passBytes/(4*logits.Size(1))))
		groups = passes(groups, maxRows, func(i int) int { return reqs[i].spec.rows() })
	}
	for _, g := range groups {
		// 2. The group's rows and each request's noise, drawn from its own
		//    generator in the shape it draws alone (picker.start).
		var rows, noise []*torch.Tensor
		n := 0
		for _, i := range g {
			s := reqs[i].spec
			if s.first != nil {
				rows = append(rows, s.first)
			}
			rows = append(rows, keep(logits.Narrow(0, offs[i]+int64(s.lo), int64(s.hi-s.lo))))
			noise = append(noise, keep(s.pick.gen.Rand([]int64{int64(s.rows()), logits.Size(1)}, torch.Float32)))
			n += s.rows()
		}
		u := keep(torch.Cat(0, noise...))
		torch.Free(noise...) // only u from here: a pass's memory is its bound
		parts = append(parts, keep(reqs[g[0]].spec.pick.sample(keep(torch.Cat(0, rows...)), u)))
		u.Free()
		sizes = append(sizes, n)
	}
	if len(parts) == 0 {
		return nil
	}
	// 3. One copy, then each part's rows to their requests.
	both := parts[0]
	if len(parts) > 1 {
		both = keep(torch.Cat(0, parts...))
	}
	host := torch.ToSlice[float64](both)
	at := 0
	part := func(n int) (tok []int64, conf []float64) {
		at += 2 * n
		return splitPicks(host[at-2*n : at])
	}
	if greedy >= 0 {
		all.tok, all.conf = part(sizes[0])
		sizes = sizes[1:]
	}
	var drawn []*picks
	if len(groups) > 0 {
		drawn = make([]*picks, len(reqs))
	}
	for gi, g := range groups {
		tok, conf := part(sizes[gi])
		for _, i := range g {
			k := reqs[i].spec.rows()
			drawn[i] = &picks{tok: tok[:k:k], conf: conf[:k:k]}
			tok, conf = tok[k:], conf[k:]
		}
	}
	return drawn
}

// passes splits each group of requests into runs of whole requests of at
// most maxRows rows (rows(i) each), a request with more alone.
func passes(groups [][]int, maxRows int, rows func(i int) int) [][]int {
	var out [][]int
	for _, g := range groups {
		start, n := 0, 0
		for j, i := range g {
			if j > start && n+rows(i) > maxRows {
				out = append(out, g[start:j])
				start, n = j, 0
			}
			n += rows(i)
		}
		out = append(out, g[start:])
	}
	return out
}

// stepAhead answers nx: its step queued ahead where alone says the
// sequence is the batch's only one, none otherwise.
func (b *Batcher) stepAhead(nx *batchNext, alone bool) {
	if !alone || b.noAhead || nx.slot != 0 || nx.picks == nil {
		nx.out <- batchOut{}
		return
	}
	start := time.Now()
	logits, ok, err := b.dec.ForwardNextOne(nx.n, nx.pos, nx.picks, nx.mask, nx.k, nx.shift)
	if ok {
		b.steps.Add(1)
		b.seqForwards.Add(1)
		b.ahead.Add(1)
		b.stepNanos.Add(int64(time.Since(start)))
	}
	nx.out <- batchOut{logits: logitRows{t: logits}, ok: ok, err: err}
}

// batchEngine is one sequence's engine: its forwards go to the Batcher's
// loop, its positions are its slot's.
type batchEngine struct {
	b          *Batcher
	slot       int
	len, limit int64 // positions committed, and the generation's
	greedy     bool  // the generation picks greedily: the step picks its rows
	mask       int64 // the token never picked
}

func (e *batchEngine) forward(ids []int64, causal, rows int, spec *pickSpec) (logitRows, error) {
	r := &batchReq{
		seq:    torch.BatchSeq{Slot: e.slot, IDs: ids, Pos: e.len, Causal: causal, Rows: rows},
		greedy: e.greedy, mask: e.mask, spec: spec,
		out: make(chan batchOut, 1),
	}
	if !e.b.send(batchEvent{req: r}) {
		return logitRows{}, errBatcherClosed
	}
	o := e.wait(r.out)
	return o.logits, o.err
}

// wait returns the loop's answer on out, or errBatcherClosed once the loop
// has returned: a request it had not taken from the events' buffer by
// then gets no answer.
func (e *batchEngine) wait(out chan batchOut) batchOut {
	select {
	case o := <-out:
		return o
	case <-e.b.done:
		select { // an answer given before the loop returned
		case o := <-out:
			return o
		default:
			return batchOut{err: errBatcherClosed}
		}
	}
}

func (e *batchEngine) commit(n int64) error {
	if n < 0 || e.len+n > e.limit {
		return fmt.Errorf("diffusion: committing %d positions after %d of %d", n, e.len, e.limit)
	}
	e.len += n
	return nil
}

// next queues the step ahead where the sequence is alone in slot 0 (a
// lone user's, who then gets the single-stream decoder's speed); a
// batched step waits for every sequence's picks.
func (e *batchEngine) next(n int, picks *torch.Tensor, mask int64, k int, shift bool) (logitRows, bool, error) {
	if e.slot != 0 || picks == nil {
		return logitRows{}, false, nil
	}
	nx := &batchNext{slot: e.slot, n: n, k: k, pos: e.len, mask: mask, picks: picks, shift: shift, out: make(chan batchOut, 1)}
	if !e.b.send(batchEvent{next: nx}) {
		return logitRows{}, false, errBatcherClosed
	}
	o := e.wait(nx.out)
	return o.logits, o.ok, o.err
}

func (e *batchEngine) room() int64 { return e.limit - e.len }

// free leaves the batch and gives the slot back.
func (e *batchEngine) free() {
	e.b.send(batchEvent{leave: true})
	e.b.slots.put(e.slot)
}

// slotPool hands out the KV cache's slots, the lowest free one first, so
// that a lone sequence is in slot 0, which the single-stream decoder's
// faster path serves (Batcher.step).
type slotPool struct {
	mu    sync.Mutex
	free  []bool
	ready chan struct{} // a token for each free slot
}

func newSlotPool(n int) *slotPool {
	p := &slotPool{free: make([]bool, n), ready: make(chan struct{}, n)}
	for i := range n {
		p.free[i] = true
		p.ready <- struct{}{}
	}
	return p
}

// get waits for a free slot, or for ctx or quit to end.
func (p *slotPool) get(ctx context.Context, quit <-chan struct{}) (int, error) {
	select {
	case <-p.ready:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-quit:
		return 0, errBatcherClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.free, true)
	p.free[i] = false
	return i, nil
}

func (p *slotPool) put(i int) {
	p.mu.Lock()
	p.free[i] = true
	p.mu.Unlock()
	p.ready <- struct{}{}
}
