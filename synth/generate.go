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
	// Tasks are task names or set names (TaskSets); empty means v2.
	Tasks []string
	// Train, Dev and Heldout are the problems per task in each split. Dev
	// is for choosing knobs (a threshold, say), so that the held-out split
	// is scored only once they are chosen.
	Train, Dev, Heldout int
	// Size is a key of Sizes; empty means "gpu".
	Size string
	// Text is the number of plain-text documents (stories) to write beside
	// the chats, so that a teacher trained on them is a language model and
	// not only a drill solver.
	Text int
	// Seed fixes every problem drawn.
	Seed uint64
}

// Split is the problems of one task.
type Split struct {
	Task    *Task
	Train   []Problem
	Dev     []Problem
	Heldout []Problem
}

// Set is everything Generate drew, per task in the order asked.
type Set struct {
	Seed  uint64
	Size  Size
	Tasks []Split
	// Text is the plain-text documents.
	Text []string
}

// expandTasks turns set names into their tasks and checks the names.
func expandTasks(names []string) ([]string, error) {
	if len(names) == 0 {
		names = []string{"v2"}
	}
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		members, ok := TaskSets[n]
		if !ok {
			members = []string{n}
		}
		for _, m := range members {
			if _, err := Lookup(m); err != nil {
				return nil, err
			}
			if seen[m] {
				return nil, fmt.Errorf("synth: task %q given twice", m)
			}
			seen[m] = true
			out = append(out, m)
		}
	}
	return out, nil
}

// attemptsPerProblem bounds the draws spent per wanted problem before a
// task's problem space is declared too small for the counts asked.
const attemptsPerProblem = 50

// Generate draws, for each task, Heldout distinct problems, then Dev
// distinct problems none of which is held out, then Train distinct problems
// whose canonical form differs from every held-out and dev one. Each split
// is drawn from its own generator, so the held-out split depends only on
// the seed, the task, the size and its count: changing Train or Dev never
// changes it.
func Generate(o Options) (*Set, error) {
	if o.Train < 0 || o.Dev < 0 || o.Heldout < 0 || o.Text < 0 {
		return nil, fmt.Errorf("synth: negative counts (train %d, dev %d, held-out %d, text %d)", o.Train, o.Dev, o.Heldout, o.Text)
	}
	if o.Train+o.Dev+o.Heldout+o.Text == 0 {
		return nil, errors.New("synth: nothing to generate: every count is 0")
	}
	if o.Size == "" {
		o.Size = "gpu"
	}
	size, ok := Sizes[o.Size]
	if !ok {
		return nil, fmt.Errorf("synth: size %q: want cpu or gpu", o.Size)
	}
	names, err := expandTasks(o.Tasks)
	if err != nil {
		return nil, err
	}
	set := &Set{Seed: o.Seed, Size: size}
	for _, name := range names {
		t, _ := Lookup(name)
		heldHashes := map[[32]byte]bool{}
		held, err := draw(t, size, o.Seed, "heldout", o.Heldout, heldHashes, nil)
		if err != nil {
			return nil, err
		}
		devHashes := map[[32]byte]bool{}
		dev, err := draw(t, size, o.Seed, "dev", o.Dev, devHashes, heldHashes)
		if err != nil {
			return nil, err
		}
		for k := range heldHashes {
			devHashes[k] = true
		}
		train, err := draw(t, size, o.Seed, "train", o.Train, map[[32]byte]bool{}, devHashes)
		if err != nil {
			return nil, err
		}
		set.Tasks = append(set.Tasks, Split{Task: t, Train: train, Dev: dev, Heldout: held})
	}
	set.Text = stories(o.Seed, o.Text)
	return set, nil
}

// Hash is the identity of a problem for the split: sha256 of its
// canonical form.
func Hash(p *Problem) [32]byte { return sha256.Sum256([]byte(p.Canonical)) }

// draw takes n problems of t from the stream (seed, task, split), skipping
// repeats (recorded in own) and anything in exclude.
func draw(t *Task, size Size, seed uint64, split string, n int, own, exclude map[[32]byte]bool) ([]Problem, error) {
	h := fnv.New64a()
	h.Write([]byte(t.Name + "/" + split))
	r := rand.New(rand.NewPCG(seed, h.Sum64()))
	out := make([]Problem, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries >= attemptsPerProblem*n+1000 {
			return nil, fmt.Errorf("synth: task %s: found only %d distinct %s problems in %d draws; ask for fewer", t.Name, len(out), split, tries)
		}
		p := t.Generate(r, size)
		k := Hash(&p)
		if own[k] || exclude[k] {
			continue
		}
		own[k] = true
		out = append(out, p)
	}
	return out, nil
}
