package data

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
)

// run is one execution of Prepare: the mixer feeding the packer, the
// packer filling sequences, sequences streamed into shards.
type run struct {
	cfg     *Config
	opts    *Options
	man     *Manifest
	logf    func(string, ...any)
	workers int
	enc     *encoder
	files   [][]FileInfo

	mix  *mixer
	prog *progress

	// The sequence being packed.
	seqTok  []uint32
	seqLoss []byte
	starts  []uint32
	fill    int

	// The document being packed: cur.tokens[off:] is still to be placed;
	// base is how much of the original document a resumed run skipped.
	cur  *taken
	off  int
	base int

	w         *shardWriter
	shardLoss uint64
	seqs      uint64 // written, all shards
	loss      uint64
	target    uint64 // sequences to stop after; 0: none
}

// execute packs everything after the kept shards.
func (r *run) execute(ctx context.Context, kept []ShardInfo) (*Manifest, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	L := r.cfg.SeqLen
	r.seqTok = make([]uint32, L)
	r.seqLoss = make([]byte, lossStride(uint64(L)))
	if r.cfg.TotalTokens > 0 {
		r.target = uint64(r.cfg.TotalTokens / int64(L))
	}

	state := resumeState{}
	for range r.cfg.Sources {
		state.Sources = append(state.Sources, sourceCursor{LastDocEpoch: -1})
	}
	if len(kept) > 0 {
		last := kept[len(kept)-1]
		if len(last.Resume.Sources) != len(r.cfg.Sources) {
			return nil, fmt.Errorf("data: the manifest's resume state has %d sources, the config %d", len(last.Resume.Sources), len(r.cfg.Sources))
		}
		state = cloneState(last.Resume)
		r.man.Shards = append(r.man.Shards, kept...)
		for _, s := range kept {
			r.seqs += s.NumSeqs
			r.loss += s.LossTokens
		}
		r.logf("resuming after %d verified shards (%d sequences)", len(kept), r.seqs)
	}
	skip := make([]int64, len(r.cfg.Sources))
	for i, c := range state.Sources {
		skip[i] = c.NextRecord
		if p := state.Partial; p != nil && p.Source == i {
			skip[i] = min(skip[i], p.Record)
		}
	}
	p := startPipeline(ctx, r.cfg, r.files, r.enc, r.workers, skip)
	r.mix = &mixer{}
	names := make([]string, len(r.cfg.Sources))
	baseSrc := make([]int64, len(r.cfg.Sources))
	for i := range r.cfg.Sources {
		r.mix.srcs = append(r.mix.srcs, &mixSource{cfg: &r.cfg.Sources[i], cur: state.Sources[i], stream: p.streams[i], log: func(s string) { r.logf("%s", s) }})
		names[i], baseSrc[i] = r.cfg.Sources[i].Name, state.Sources[i].Stats.Tokens
	}
	if pd := state.Partial; pd != nil {
		if pd.Source < 0 || pd.Source >= len(r.mix.srcs) {
			return nil, fmt.Errorf("data: resume state names source %d of %d", pd.Source, len(r.mix.srcs))
		}
		d, err := r.mix.srcs[pd.Source].restorePartial(ctx, pd)
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		r.cur = &taken{src: pd.Source, record: pd.Record, doc: pd.Doc, d: d}
		r.base = pd.Offset
	}
	var total int64
	if r.target > 0 {
		total = int64(r.target) * int64(L)
	}
	r.prog = newProgress(r.opts.Log, r.opts.Terminal, total, names, int64(r.seqs)*int64(L), baseSrc)
	defer r.prog.finish()

	if err := r.pack(ctx); err != nil {
		if r.w != nil {
			r.w.abort()
		}
		if errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("data: interrupted after %d committed shards; run the same command again to resume", len(r.man.Shards))
		}
		return nil, err
	}
	r.prog.finish()
	r.finishManifest(true)
	if err := writeManifest(r.cfg.Out, r.man); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	t := r.man.Totals
	r.logf("done: %d shards, %d sequences of %d tokens (%d loss-ON), %d tokens dropped", len(r.man.Shards), t.Sequences, L, t.LossTokens, t.DroppedTokens)
	// A source that gave nothing, or lost most of its records to one
	// cause, fails the run; the shards and the manifest are kept.
	for _, s := range r.mix.srcs {
		if err := s.yieldError(); err != nil {
			return r.man, err
		}
	}
	if len(r.man.Shards) == 0 {
		r.logf("warning: the sources hold fewer than seq_len (%d) tokens: no sequence written", L)
	}
	return r.man, nil
}

// pack runs until the sources are done or the target is reached.
func (r *run) pack(ctx context.Context) error {
	L := r.cfg.SeqLen
	for r.target == 0 || r.seqs < r.target {
		if r.cur == nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			t, ok, err := r.mix.next(ctx)
			if err != nil {
				return fmt.Errorf("data: %w", err)
			}
			if !ok {
				break
			}
			r.cur, r.off, r.base = &t, 0, 0
			r.starts = append(r.starts, uint32(r.fill))
		}
		d := r.cur.d
		n := min(L-r.fill, len(d.tokens)-r.off)
		copy(r.seqTok[r.fill:], d.tokens[r.off:r.off+n])
		for j := 0; j < n; j++ {
			if d.loss == nil || d.loss[r.off+j] {
				k := r.fill + j
				r.seqLoss[k>>3] |= 1 << (k & 7)
			}
		}
		r.fill += n
		r.off += n
		if r.off == len(d.tokens) {
			r.cur = nil
		}
		if r.fill == L {
			if err := r.emit(); err != nil {
				return err
			}
		}
	}
	// The last, partial sequence is dropped, never padded: padding with
	// EOS teaches a model to stop early.
	if r.w != nil {
		return r.commit()
	}
	return nil
}

// emit hands the full sequence to the current shard, committing the shard
// when it is full or the run's target is reached.
func (r *run) emit() error {
	if r.w == nil {
		var err error
		path := filepath.Join(r.cfg.Out, shardName(len(r.man.Shards)))
		if r.w, err = createShard(path, r.cfg.SeqLen, uint32(r.man.Tokenizer.VocabSize)); err != nil {
			return fmt.Errorf("data: %w", err)
		}
		r.shardLoss = 0
	}
	if err := r.w.add(r.seqTok, r.seqLoss, r.starts); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	n := uint64(LossMask(r.seqLoss).Count(r.cfg.SeqLen))
	r.shardLoss += n
	r.loss += n
	r.seqs++
	r.fill = 0
	r.starts = r.starts[:0]
	clear(r.seqLoss)
	r.prog.update(int64(r.seqs)*int64(r.cfg.SeqLen), r.takenPerSource(), len(r.man.Shards))
	if r.w.n == uint64(r.man.SeqsPerShard) || (r.target > 0 && r.seqs == r.target) {
		return r.commit()
	}
	return nil
}

// commit finishes the current shard, records it with the state to resume
// from, and rewrites the manifest.
func (r *run) commit() error {
	ws, err := r.w.commit()
	r.w = nil
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	idx := len(r.man.Shards)
	r.man.Shards = append(r.man.Shards, ShardInfo{
		File:         shardName(idx),
		NumSeqs:      ws.numSeqs,
		NumDocStarts: ws.numDocStarts,
		LossTokens:   r.shardLoss,
		Bytes:        ws.bytes,
		CRC32C:       fmt.Sprintf("%08x", ws.crc),
		Resume:       r.snapshot(),
	})
	r.finishManifest(false)
	if err := writeManifest(r.cfg.Out, r.man); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	r.prog.update(int64(r.seqs)*int64(r.cfg.SeqLen), r.takenPerSource(), len(r.man.Shards))
	if r.opts.AfterShard != nil {
		if err := r.opts.AfterShard(idx); err != nil {
			return err
		}
	}
	return nil
}

// snapshot is the state right after the current sequence: every source's
// cursor and the document being packed, if one is unfinished.
func (r *run) snapshot() resumeState {
	var st resumeState
	for _, s := range r.mix.srcs {
		st.Sources = append(st.Sources, s.cur)
	}
	st = cloneState(st)
	if r.cur != nil {
		st.Partial = &partialDoc{Source: r.cur.src, Record: r.cur.record, Doc: r.cur.doc, Offset: r.base + r.off}
	}
	return st
}

// cloneState deep-copies the maps, so that later counting does not change
// a state already recorded.
func cloneState(s resumeState) resumeState {
	out := resumeState{Sources: append([]sourceCursor(nil), s.Sources...)}
	for i := range out.Sources {
		if m := out.Sources[i].Stats.Skipped; m != nil {
			c := make(map[string]int64, len(m))
			for k, v := range m {
				c[k] = v
			}
			out.Sources[i].Stats.Skipped = c
		}
	}
	if s.Partial != nil {
		p := *s.Partial
		out.Partial = &p
	}
	return out
}

func (r *run) takenPerSource() []int64 {
	out := make([]int64, len(r.mix.srcs))
	for i, s := range r.mix.srcs {
		out[i] = s.cur.Stats.Tokens
	}
	return out
}

// finishManifest updates the sources' stats and the totals.
func (r *run) finishManifest(complete bool) {
	m := r.man
	var taken int64
	for _, s := range r.mix.srcs {
		taken += s.cur.Stats.Tokens
	}
	for i, s := range r.mix.srcs {
		m.Sources[i].Stats = cloneState(resumeState{Sources: []sourceCursor{s.cur}}).Sources[0].Stats
		m.Sources[i].Share = 0
		if taken > 0 {
			m.Sources[i].Share = float64(s.cur.Stats.Tokens) / float64(taken)
		}
	}
	written := r.seqs * uint64(r.cfg.SeqLen)
	m.Totals = Totals{Sequences: r.seqs, Tokens: written, LossTokens: r.loss, TakenTokens: taken}
	if complete {
		m.Totals.DroppedTokens = taken - int64(written)
	}
	m.Complete = complete
}
