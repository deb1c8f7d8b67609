package data

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The evaluation-set guard. The model is scored on GPQA-Diamond, MATH-500,
// LiveCodeBench v6 and MMLU-Pro, and nothing may be trained, tuned or
// selected on the validation or test split of any public benchmark.
// The likeliest way such data gets in is not intent but a glob: a
// downloaded dataset directory holds test-*.parquet beside train-*.parquet,
// or a reasoning mix bundles a benchmark. So every source (and the prompts
// of `dllm data distill`) is checked by name before anything is read, and
// a match is refused with the reason; there is no switch to turn it off.
//
// It checks names, and the shape of each file (guard_content.go: the
// benchmarks' official files by their columns, however they are named); it
// cannot find benchmark questions copied into an innocently named corpus
// of another shape (docs/recipe.md lists the corpora known to need care).

// evalBenchmarks are the scored benchmarks, as normalized name fragments
// (lower case, letters and digits only). Every split of them is refused:
// GPQA ships its questions as a "train" split, and MATH-500, LiveCodeBench
// and MMLU-Pro have nothing but evaluation splits.
var evalBenchmarks = []struct{ key, name string }{
	{"gpqa", "GPQA"},
	{"math500", "MATH-500"},
	{"livecodebench", "LiveCodeBench"},
	{"mmlupro", "MMLU-Pro"},
}

// evalSplitStems are file-name stems that mark an evaluation split, in the
// layouts Hugging Face datasets use (test-00000-of-00001.parquet,
// validation.jsonl, dev/…). They also cover the benchmarks' parents: MATH-500
// is drawn from MATH's test split and MMLU-Pro from MMLU's test set.
var evalSplitStems = map[string]bool{
	"test": true, "tests": true, "testing": true,
	"validation": true, "valid": true, "val": true,
	"dev": true, "eval": true, "evaluation": true,
	"heldout": true, // dllm data synth's held-out split, the proxy's yardstick
}

// evalSplitDirs are directory names that hold an evaluation split. Shorter
// than evalSplitStems: "dev" or "eval" are too common as ordinary directory
// names (a user's home, a mount point) to refuse on.
var evalSplitDirs = map[string]bool{"test": true, "testing": true, "validation": true}

// normalizeName keeps the lower-case letters and digits of s, so that
// "MATH-500", "math_500" and "Math500" compare equal.
func normalizeName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// EvalSetReason says why path (a file, directory or glob pattern) looks like
// an evaluation set that must not be trained on, or "" when it does not.
func EvalSetReason(path string) string {
	norm := normalizeName(path)
	for _, b := range evalBenchmarks {
		if strings.Contains(norm, b.key) {
			return fmt.Sprintf("it names the benchmark %s, which the model is evaluated on", b.name)
		}
	}
	clean := filepath.ToSlash(filepath.Clean(path))
	parts := strings.Split(clean, "/")
	base := strings.ToLower(parts[len(parts)-1])
	// The stem is the name up to its first '-', '_' or '.': "test" in
	// test-00000-of-00001.parquet, test_prompts.jsonl and test.jsonl.gz,
	// but not in testdata.jsonl or latest.parquet.
	stem := base
	if i := strings.IndexAny(stem, "-_."); i >= 0 {
		stem = stem[:i]
	}
	if evalSplitStems[stem] {
		return fmt.Sprintf("its file name %q marks an evaluation split (%s)", parts[len(parts)-1], stem)
	}
	// The directories that hold the file: a split directory anywhere below
	// the dataset (MATH/test/algebra/1.json) or a glob over one.
	for _, dir := range parts[:len(parts)-1] {
		if evalSplitDirs[strings.ToLower(dir)] {
			return fmt.Sprintf("it lies in a %q directory, which marks an evaluation split", dir)
		}
	}
	return ""
}

// CheckNotEvalSet returns an error when path looks like an evaluation set
// (EvalSetReason), or is a file with the shape of a scored benchmark's
// official file (evalContentReason); what names it in the message.
func CheckNotEvalSet(what, path string) error {
	r := EvalSetReason(path)
	if r == "" {
		r = evalContentReason(path)
	}
	if r != "" {
		return fmt.Errorf("%s %s: refused by the evaluation-set guard: %s. Never train on GPQA, MATH-500, LiveCodeBench, MMLU-Pro or any test/validation split; use training splits only (docs/recipe.md)", what, path, r)
	}
	return nil
}

// evalGuardErrors checks every source's name, its configured paths and the
// files they expand to. Paths that do not resolve are left to the reader,
// which reports them with more context.
func (c *Config) evalGuardErrors() []string {
	var errs []string
	for _, s := range c.Sources {
		if b := evalBenchmarkIn(s.Name); b != "" {
			errs = append(errs, fmt.Sprintf("source %q: refused by the evaluation-set guard: its name names the benchmark %s", s.Name, b))
			continue
		}
		checked := map[string]bool{}
		check := func(p string) bool {
			if checked[p] {
				return false
			}
			checked[p] = true
			if err := CheckNotEvalSet(fmt.Sprintf("source %q: path", s.Name), p); err != nil {
				errs = append(errs, err.Error())
				return true
			}
			return false
		}
		bad := false
		for _, p := range s.Paths {
			bad = check(p) || bad
		}
		if bad || len(s.Paths) == 0 {
			continue
		}
		// A directory or glob may hold test-*.parquet beside the training
		// files; only the expanded list shows it.
		files, err := expandPaths(s)
		if err != nil {
			continue
		}
		wd, _ := os.Getwd()
		for _, f := range files {
			// Relative to the working directory where possible, so that a
			// checkout under ~/test/ does not refuse every source.
			p := f.Path
			if rel, err := filepath.Rel(wd, p); err == nil && wd != "" && !strings.HasPrefix(rel, "..") {
				p = rel
			}
			if check(p) {
				break // one refused file is enough to fix the source
			}
		}
	}
	return errs
}

// evalBenchmarkIn returns the benchmark a name mentions, or "".
func evalBenchmarkIn(name string) string {
	norm := normalizeName(name)
	for _, b := range evalBenchmarks {
		if strings.Contains(norm, b.key) {
			return b.name
		}
	}
	return ""
}
