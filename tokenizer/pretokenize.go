package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// preTokenizer splits one normalized stretch into words for the model.
// atStart tells whether the stretch begins the input, which Metaspace's
// "first" prepend scheme depends on.
type preTokenizer func(s string, atStart bool, emit func(word string, atStart bool))

// gpt2Pattern is the split ByteLevel applies when use_regex is set.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// buildPreTokenizer compiles tokenizer.json's "pre_tokenizer". byteLevel
// reports a ByteLevel step: the model then works on raw bytes, so that step
// itself only contributes its optional prefix space and regex split.
func buildPreTokenizer(raw json.RawMessage) (pt preTokenizer, byteLevel bool, err error) {
	if isNull(raw) {
		return nil, false, nil
	}
	kind, err := typed(raw)
	if err != nil {
		return nil, false, err
	}
	switch kind {
	case "Sequence":
		var c struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, false, err
		}
		var steps []preTokenizer
		for _, r := range c.PreTokenizers {
			if byteLevel {
				// Later steps would see byte-level spelling, which the
				// raw-byte model never materialises.
				return nil, false, fmt.Errorf("pre-tokenizer after ByteLevel is unsupported")
			}
			step, bl, err := buildPreTokenizer(r)
			if err != nil {
				return nil, false, err
			}
			byteLevel = bl
			if step != nil {
				steps = append(steps, step)
			}
		}
		return chainPreTokenizers(steps), byteLevel, nil
	case "ByteLevel":
		var c struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, false, err
		}
		var split preTokenizer
		if c.UseRegex == nil || *c.UseRegex {
			m, err := compilePattern(patternJSON{Regex: ptr(gpt2Pattern)})
			if err != nil {
				return nil, false, err
			}
			split = splitPreTokenizer(m, "Isolated", false)
		}
		if !c.AddPrefixSpace {
			return split, true, nil
		}
		prefix := func(s string, atStart bool, emit func(string, bool)) {
			if !strings.HasPrefix(s, " ") {
				s = " " + s
			}
			emit(s, atStart)
		}
		return chainPreTokenizers([]preTokenizer{prefix, split}), true, nil
	case "Split":
		var c struct {
			Pattern  patternJSON `json:"pattern"`
			Behavior string      `json:"behavior"`
			Invert   bool        `json:"invert"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, false, err
		}
		if !knownBehavior(c.Behavior) {
			return nil, false, fmt.Errorf("split behavior %q is unsupported", c.Behavior)
		}
		m, err := compilePattern(c.Pattern)
		if err != nil {
			return nil, false, err
		}
		return splitPreTokenizer(m, c.Behavior, c.Invert), false, nil
	case "Metaspace":
		return buildMetaspace(raw)
	case "Digits":
		var c struct {
			Individual bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, false, err
		}
		behavior := "Contiguous"
		if c.Individual {
			behavior = "Isolated"
		}
		return splitPreTokenizer(digitMatcher, behavior, false), false, nil
	}
	return nil, false, fmt.Errorf("unsupported pre-tokenizer type %q", kind)
}

func ptr[T any](v T) *T { return &v }

// chainPreTokenizers feeds every word of one step into the next.
func chainPreTokenizers(steps []preTokenizer) preTokenizer {
	var chain []preTokenizer
	for _, s := range steps {
		if s != nil {
			chain = append(chain, s)
		}
	}
	switch len(chain) {
	case 0:
		return nil
	case 1:
		return chain[0]
	}
	return func(s string, atStart bool, emit func(string, bool)) {
		var run func(i int, s string, atStart bool)
		run = func(i int, s string, atStart bool) {
			if i == len(chain) {
				emit(s, atStart)
				return
			}
			chain[i](s, atStart, func(w string, st bool) { run(i+1, w, st) })
		}
		run(0, s, atStart)
	}
}

// buildMetaspace handles SentencePiece's "▁" spelling of spaces, in both
// the current (prepend_scheme) and legacy (add_prefix_space) forms.
func buildMetaspace(raw json.RawMessage) (preTokenizer, bool, error) {
	var c struct {
		Replacement    string `json:"replacement"`
		PrependScheme  string `json:"prepend_scheme"`
		AddPrefixSpace *bool  `json:"add_prefix_space"`
		Split          *bool  `json:"split"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, err
	}
	scheme := metaspaceScheme(c.PrependScheme, c.AddPrefixSpace)
	repl := c.Replacement
	split := c.Split == nil || *c.Split
	sep := splitPreTokenizer(literalMatcher(repl), "MergedWithNext", false)
	return func(s string, atStart bool, emit func(string, bool)) {
		s = strings.ReplaceAll(s, " ", repl)
		if (scheme == "always" || scheme == "first" && atStart) && !strings.HasPrefix(s, repl) {
			s = repl + s
		}
		if split {
			sep(s, atStart, emit)
			return
		}
		emit(s, atStart)
	}, false, nil
}

// metaspaceScheme resolves the prepend scheme, defaulting like HF does.
func metaspaceScheme(scheme string, legacyAddPrefix *bool) string {
	switch {
	case scheme != "":
		return scheme
	case legacyAddPrefix != nil && !*legacyAddPrefix:
		return "never"
	}
	return "always"
}
