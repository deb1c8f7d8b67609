package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
)

// Batching of records handed to the tokenizing workers: big enough to
// amortize the hand-off, small enough to keep every worker busy. A
// source's first batches are smaller, so that a small or capped source
// does not tokenize far ahead of what the mixer takes from it.
const (
	firstBatchRecords = 4
	batchRecords      = 64
	batchBytes        = 1 << 20
)

// job is a batch of consecutive records of one source. The source's
// reader queues it in its stream (which keeps order) and on the shared job
// channel (which spreads the work); a worker fills items and closes done.
type job struct {
	src    *SourceConfig
	ord0   int64
	recs   []rawRecord
	epochs []int
	bytes  int
	items  []item
	err    error // a read error (then recs is empty) or a worker failure
	done   chan struct{}
	ctx    context.Context // the source's: cancelled, the job is dropped
}

// stream yields one source's items in record order.
type stream struct {
	q    chan *job
	cur  *job
	idx  int
	stop context.CancelFunc // ends the source's reading and tokenizing
}

// next returns the source's next item, or io.EOF after the last.
func (s *stream) next(ctx context.Context) (*item, error) {
	for {
		if s.cur != nil && s.idx < len(s.cur.items) {
			s.idx++
			return &s.cur.items[s.idx-1], nil
		}
		s.cur = nil
		var j *job
		var ok bool
		select {
		case j, ok = <-s.q:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !ok {
			return nil, io.EOF
		}
		select {
		case <-j.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if j.err != nil {
			return nil, j.err
		}
		s.cur, s.idx = j, 0
	}
}

// pipeline runs one reader per source and a shared pool of tokenizing
// workers.
type pipeline struct {
	jobs    chan *job
	streams []*stream
}

// startPipeline starts the readers and workers; they stop when ctx is
// cancelled. skip[i] records of source i are read and dropped (a resumed
// run), without being tokenized.
func startPipeline(ctx context.Context, cfg *Config, files [][]FileInfo, enc *encoder, workers int, skip []int64) *pipeline {
	p := &pipeline{jobs: make(chan *job, workers)}
	for w := 0; w < workers; w++ {
		go p.work(ctx, enc)
	}
	for i := range cfg.Sources {
		sctx, stop := context.WithCancel(ctx)
		s := &stream{q: make(chan *job, workers+2), stop: stop}
		p.streams = append(p.streams, s)
		go p.read(sctx, cfg, i, files[i], s, skip[i])
	}
	return p
}

func (p *pipeline) work(ctx context.Context, enc *encoder) {
	for {
		select {
		case j := <-p.jobs:
			p.encodeJob(enc, j)
		case <-ctx.Done():
			return
		}
	}
}

func (p *pipeline) encodeJob(enc *encoder, j *job) {
	defer close(j.done)
	if j.ctx.Err() != nil {
		return // the mixer is done with this source
	}
	// A panic in tokenization or template rendering is a bug, but it must
	// surface as an error naming the record, not take the process down.
	defer func() {
		if r := recover(); r != nil {
			j.err = fmt.Errorf("source %q: tokenizing records %d-%d failed: %v\n%s", j.src.Name, j.ord0, j.ord0+int64(len(j.recs))-1, r, debug.Stack())
		}
	}()
	j.items = make([]item, len(j.recs))
	for i, r := range j.recs {
		it := enc.encode(j.src, r)
		it.ord, it.epoch = j.ord0+int64(i), j.epochs[i]
		j.items[i] = it
	}
	j.recs = nil
}

// read streams a source's records, epoch after epoch when it repeats,
// through the optional shuffle buffer, in batches.
func (p *pipeline) read(ctx context.Context, cfg *Config, si int, files []FileInfo, s *stream, skip int64) {
	defer close(s.q)
	src := &cfg.Sources[si]
	var batch *job
	var ord int64
	limit := firstBatchRecords
	send := func(j *job) error {
		select {
		case s.q <- j:
		case <-ctx.Done():
			return ctx.Err()
		}
		if j.err != nil {
			return nil
		}
		select {
		case p.jobs <- j:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	flush := func() error {
		if batch == nil {
			return nil
		}
		j := batch
		batch = nil
		limit = min(2*limit, batchRecords)
		return send(j)
	}
	out := func(r rawRecord, epoch int) error {
		if ord < skip {
			ord++
			return nil
		}
		if batch == nil {
			batch = &job{src: src, ord0: ord, done: make(chan struct{}), ctx: ctx}
		}
		batch.recs = append(batch.recs, r)
		batch.epochs = append(batch.epochs, epoch)
		batch.bytes += len(r.value)
		ord++
		if len(batch.recs) >= limit || batch.bytes >= batchBytes {
			return flush()
		}
		return nil
	}
	shuf := newShuffler(src.ShuffleBuffer, cfg.Seed, si, out)
	err := func() error {
		for epoch := 0; ; epoch++ {
			n := 0
			for _, fi := range fileOrder(files, src.ShuffleFiles, cfg.Seed, si, epoch) {
				err := readFile(ctx, fi, *src, func(r rawRecord) error {
					n++
					return shuf.push(r, epoch)
				})
				if err != nil {
					return err
				}
			}
			// Each epoch is shuffled on its own, so epochs never mix: the
			// mixer relies on epochs arriving in order.
			if err := shuf.drain(); err != nil {
				return err
			}
			if !src.Repeat || n == 0 {
				break
			}
		}
		return flush()
	}()
	if err != nil && !errors.Is(err, context.Canceled) {
		j := &job{src: src, err: err, done: make(chan struct{}), ctx: ctx}
		close(j.done)
		send(j)
	}
}

// fileOrder is the file order of one epoch: sorted, or shuffled by a
// generator seeded with the run's seed, the source and the epoch.
func fileOrder(files []FileInfo, shuffle bool, seed uint64, si, epoch int) []FileInfo {
	if !shuffle {
		return files
	}
	out := append([]FileInfo(nil), files...)
	rng := rand.New(rand.NewPCG(seed, uint64(si)<<32|uint64(epoch)|1<<63))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// shuffler is a reservoir-style shuffle buffer: once full, each new record
// replaces a random buffered one, which is emitted.
type shuffler struct {
	size   int
	buf    []rawRecord
	epochs []int
	rng    *rand.Rand
	out    func(rawRecord, int) error
}

func newShuffler(size int, seed uint64, si int, out func(rawRecord, int) error) *shuffler {
	return &shuffler{size: size, rng: rand.New(rand.NewPCG(seed, uint64(si)|1<<62)), out: out}
}

func (s *shuffler) push(r rawRecord, epoch int) error {
	if s.size <= 1 {
		return s.out(r, epoch)
	}
	if len(s.buf) < s.size {
		s.buf = append(s.buf, r)
		s.epochs = append(s.epochs, epoch)
		return nil
	}
	k := s.rng.IntN(s.size)
	old, oldEpoch := s.buf[k], s.epochs[k]
	s.buf[k], s.epochs[k] = r, epoch
	return s.out(old, oldEpoch)
}

func (s *shuffler) drain() error {
	// Emptied in a shuffled order too, so the tail is not in file order.
	for len(s.buf) > 0 {
		k := s.rng.IntN(len(s.buf))
		r, e := s.buf[k], s.epochs[k]
		last := len(s.buf) - 1
		s.buf[k], s.epochs[k] = s.buf[last], s.epochs[last]
		s.buf, s.epochs = s.buf[:last], s.epochs[:last]
		if err := s.out(r, e); err != nil {
			return err
		}
	}
	return nil
}
