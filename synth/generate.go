package synth

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
)

// Options say what Generate draws.
type Options struct {
	// Tasks are task names; empty means all of them.
	Tasks []string
	// Train and Heldout are the problems per task in each split.
	Train, Heldout int
	// Seed fixes every problem drawn.
	Seed uint64
}

// Split is the problems of one task.
type Split struct {
	Task    *Task
	Train   []Problem
	Heldout []Problem
}

// Set is everything Generate drew, per task in the order asked.
type Set struct {
	Seed  uint64
	Tasks []Split
}

// attemptsPerProblem bounds the draws spent per wanted problem before a
// task's problem space is declared too small for the counts asked.
const attemptsPerProblem = 50

// Generate draws, for each task, Heldout distinct problems and then Train
// distinct problems whose canonical form differs from every held-out one.
// The held-out split is drawn first from its own generator, so it depends
// only on the seed, the task and its size: changing Train never changes
// it.
func Generate(o Options) (*Set, error) {
	if o.Train < 0 || o.Heldout < 0 {
		return nil, fmt.Errorf("synth: negative counts (train %d, held-out %d)", o.Train, o.Heldout)
	}
	if o.Train+o.Heldout == 0 {
		return nil, errors.New("synth: nothing to generate: train and held-out counts are both 0")
	}
	names := o.Tasks
	if len(names) == 0 {
		names = TaskNames()
	}
	set := &Set{Seed: o.Seed}
	seen := map[string]bool{}
	for _, name := range names {
		t, err := Lookup(name)
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("synth: task %q given twice", name)
		}
		seen[name] = true
		heldHashes := map[[32]byte]bool{}
		held, err := draw(t, o.Seed, "heldout", o.Heldout, heldHashes, nil)
		if err != nil {
			return nil, err
		}
		train, err := draw(t, o.Seed, "train", o.Train, map[[32]byte]bool{}, heldHashes)
		if err != nil {
			return nil, err
		}
		set.Tasks = append(set.Tasks, Split{Task: t, Train: train, Heldout: held})
	}
	return set, nil
}

// Hash is the identity of a problem for the split: sha256 of its
// canonical form.
func Hash(p *Problem) [32]byte { return sha256.Sum256([]byte(p.Canonical)) }

// draw takes n problems of t from the stream (seed, task, split), skipping
// repeats (recorded in own) and anything in exclude.
func draw(t *Task, seed uint64, split string, n int, own, exclude map[[32]byte]bool) ([]Problem, error) {
	h := fnv.New64a()
	h.Write([]byte(t.Name + "/" + split))
	r := rand.New(rand.NewPCG(seed, h.Sum64()))
	out := make([]Problem, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries >= attemptsPerProblem*n+1000 {
			return nil, fmt.Errorf("synth: task %s: found only %d distinct %s problems in %d draws; ask for fewer", t.Name, len(out), split, tries)
		}
		p := t.Generate(r)
		k := Hash(&p)
		if own[k] || exclude[k] {
			continue
		}
		own[k] = true
		out = append(out, p)
	}
	return out, nil
}
