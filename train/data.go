package train

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"strings"

	"dllm/data"
)

// Source is a fixed collection of packed sequences of one length: a data
// directory (OpenData) or sequences in memory (NewMemorySource).
type Source interface {
	// Len is the number of sequences.
	Len() int
	// SeqLen is the number of tokens of every sequence.
	SeqLen() int
	// Seq returns sequence i (0 <= i < Len) in freshly allocated slices.
	Seq(i int) sequence
	io.Closer
}

// shardSource reads the shards of a `dllm data prepare` directory.
type shardSource struct {
	shards []*data.Shard
	first  []int // index of each shard's first sequence; last = total
	seqLen int
}

// OpenData opens the data directory dir (manifest.json and its shards,
// each fully validated) as a Source. A directory whose preparation has not
// finished, or whose shards are missing, truncated or damaged, is refused
// unless allowIncomplete: then its good shards are used and warn says what
// is left out.
func OpenData(dir string, allowIncomplete bool, warn func(string)) (Source, error) {
	man, err := data.ReadManifest(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("train: data %s: no %s: not a prepared data directory (make one with dllm data prepare)", dir, data.ManifestFile)
	}
	if err != nil {
		return nil, fmt.Errorf("train: data: %w", err)
	}
	s := &shardSource{first: []int{0}, seqLen: man.SeqLen}
	var problems []string
	if !man.Complete {
		problems = append(problems, fmt.Sprintf("its preparation has not finished (%s is not marked complete: the dllm data prepare run was interrupted, or is still going and must be waited for)", data.ManifestFile))
	}
	for _, info := range man.Shards {
		sh, err := data.OpenRecordedShard(dir, info)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if sh.SeqLen() != s.seqLen {
			sh.Close()
			s.Close()
			return nil, fmt.Errorf("train: data: %s has seq_len %d, the manifest says %d", sh.Path, sh.SeqLen(), s.seqLen)
		}
		s.shards = append(s.shards, sh)
		s.first = append(s.first, s.first[len(s.first)-1]+sh.NumSeqs())
	}
	if len(problems) > 0 {
		if err := incomplete(dir, problems, len(s.shards), len(man.Shards), allowIncomplete, warn); err != nil {
			s.Close()
			return nil, err
		}
	}
	if s.Len() == 0 {
		s.Close()
		return nil, fmt.Errorf("train: data %s: no sequences", dir)
	}
	return s, nil
}

// maxProblems bounds the problems an incomplete directory's message lists:
// a directory with thousands of missing shards needs a few examples only.
const maxProblems = 5

// incomplete refuses an incomplete data directory, or with allow warns
// that training goes on with the good shards, of which there must be some.
func incomplete(dir string, problems []string, good, listed int, allow bool, warn func(string)) error {
	if n := len(problems); n > maxProblems {
		problems = append(problems[:maxProblems:maxProblems], fmt.Sprintf("%d more", n-maxProblems))
	}
	what := fmt.Sprintf("data %s is incomplete: %s", dir, strings.Join(problems, "; "))
	finish := fmt.Sprintf("Finish it by running the same dllm data prepare command again (same config, --out %s; it resumes after the last good shard)", dir)
	switch {
	case good == 0:
		return fmt.Errorf("train: %s, and no shard is usable. %s", what, finish)
	case !allow:
		return fmt.Errorf("train: %s. %s, or pass --allow-incomplete-data (data.allow_incomplete: true) to train on the %d good shard(s) of the %d the manifest lists", what, finish, good, listed)
	case warn != nil:
		warn(fmt.Sprintf("%s; training on the %d good shard(s) of the %d the manifest lists, as data.allow_incomplete says", what, good, listed))
	}
	return nil
}

func (s *shardSource) Len() int    { return s.first[len(s.first)-1] }
func (s *shardSource) SeqLen() int { return s.seqLen }

func (s *shardSource) Seq(i int) sequence {
	k := 0
	for s.first[k+1] <= i {
		k++
	}
	toks, loss, starts := s.shards[k].Seq(i - s.first[k])
	q := sequence{tokens: make([]int64, len(toks)), loss: make([]bool, len(toks)), starts: make([]int, len(starts))}
	for j, t := range toks {
		q.tokens[j] = int64(t)
		q.loss[j] = loss.On(j)
	}
	for j, st := range starts {
		q.starts[j] = int(st)
	}
	return q
}

func (s *shardSource) Close() error {
	var err error
	for _, sh := range s.shards {
		err = errors.Join(err, sh.Close())
	}
	s.shards = nil
	return err
}

// syntheticSource draws uniformly random tokens (one document per
// sequence, every token a target); sequence i depends only on the seed and
// i, so the order of reads does not matter.
type syntheticSource struct {
	seed   uint64
	seqLen int
	vocab  int // tokens are drawn from [0, vocab) minus avoid
	avoid  int64
}

// numSynthetic is the number of sequences a synthetic source holds.
const numSynthetic = 1 << 30

func (s *syntheticSource) Len() int     { return numSynthetic }
func (s *syntheticSource) SeqLen() int  { return s.seqLen }
func (s *syntheticSource) Close() error { return nil }

func (s *syntheticSource) Seq(i int) sequence {
	rng := rand.New(rand.NewPCG(s.seed^0x5eed5eed, uint64(i)))
	q := sequence{tokens: make([]int64, s.seqLen), loss: make([]bool, s.seqLen), starts: []int{0}}
	for j := range q.tokens {
		t := int64(rng.IntN(s.vocab))
		for t == s.avoid {
			t = int64(rng.IntN(s.vocab))
		}
		q.tokens[j], q.loss[j] = t, true
	}
	return q
}

// memorySource holds sequences in memory (tests, toy runs).
type memorySource struct{ seqs []sequence }

// NewMemorySource is a Source over in-memory sequences of equal length:
// tokens, and optionally per-sequence loss masks (nil: all on) and
// document starts (nil: one document).
func NewMemorySource(tokens [][]int64, loss [][]bool, starts [][]int) (Source, error) {
	if len(tokens) == 0 {
		return nil, errors.New("train: memory source: no sequences")
	}
	m := &memorySource{}
	for i, t := range tokens {
		if len(t) != len(tokens[0]) {
			return nil, fmt.Errorf("train: memory source: sequence %d has %d tokens, sequence 0 has %d", i, len(t), len(tokens[0]))
		}
		q := sequence{tokens: t, starts: []int{0}}
		if loss != nil {
			q.loss = loss[i]
		} else {
			q.loss = make([]bool, len(t))
			for j := range q.loss {
				q.loss[j] = true
			}
		}
		if starts != nil {
			q.starts = starts[i]
		}
		m.seqs = append(m.seqs, q)
	}
	return m, nil
}

func (m *memorySource) Len() int     { return len(m.seqs) }
func (m *memorySource) SeqLen() int  { return len(m.seqs[0].tokens) }
func (m *memorySource) Close() error { return nil }
func (m *memorySource) Seq(i int) sequence {
	q := m.seqs[i]
	return sequence{tokens: append([]int64(nil), q.tokens...), loss: append([]bool(nil), q.loss...), starts: append([]int(nil), q.starts...)}
}

// loader walks a Source epoch after epoch, each epoch in an order that
// depends only on (seed, epoch), so its whole state is the number of
// sequences consumed: that is what checkpoints store.
type loader struct {
	src     Source
	seqLen  int // crop length
	shuffle bool
	seed    uint64
	pos     int64 // sequences consumed

	epoch int64
	perm  []int
}

// next returns the next sequence, cropped to seqLen.
func (l *loader) next() sequence {
	n := int64(l.src.Len())
	e, k := l.pos/n, int(l.pos%n)
	l.pos++
	i := k
	if l.shuffle {
		if l.perm == nil || e != l.epoch {
			l.perm = rand.New(rand.NewPCG(l.seed, uint64(e))).Perm(int(n))
			l.epoch = e
		}
		i = l.perm[k]
	}
	return crop(l.src.Seq(i), l.seqLen)
}

// crop keeps the first L tokens of q and the document starts among them.
func crop(q sequence, L int) sequence {
	if L <= 0 || L >= len(q.tokens) {
		return q
	}
	q.tokens, q.loss = q.tokens[:L], q.loss[:L]
	k := 0
	for k < len(q.starts) && q.starts[k] < L {
		k++
	}
	q.starts = q.starts[:k]
	return q
}

// describeSource names a source for the log.
func describeSource(s Source) string {
	switch s := s.(type) {
	case *shardSource:
		return fmt.Sprintf("%d sequences in %d shard(s)", s.Len(), len(s.shards))
	case *syntheticSource:
		return "synthetic random tokens"
	case *sliceSource:
		return fmt.Sprintf("%d of the %s", s.n, describeSource(s.src))
	}
	return fmt.Sprintf("%d sequences", s.Len())
}

// sliceSource is sequences [off, off+n) of another source (hold_out).
type sliceSource struct {
	src    Source
	off, n int
}

func (s *sliceSource) Len() int           { return s.n }
func (s *sliceSource) SeqLen() int        { return s.src.SeqLen() }
func (s *sliceSource) Seq(i int) sequence { return s.src.Seq(s.off + i) }
func (s *sliceSource) Close() error       { return nil } // the trainer closes src
