package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites one stretch of text between added tokens.
type normalizer func(string) string

// buildNormalizer compiles tokenizer.json's "normalizer"; nil means none.
func buildNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	kind, err := typed(raw)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Lowercase":
		return strings.ToLower, nil
	case "Strip":
		var c struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, err
		}
		return func(s string) string {
			if c.Left {
				s = strings.TrimLeftFunc(s, isSpace)
			}
			if c.Right {
				s = strings.TrimRightFunc(s, isSpace)
			}
			return s
		}, nil
	case "Prepend":
		var c struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, err
		}
		return func(s string) string {
			if s == "" {
				return s
			}
			return c.Prepend + s
		}, nil
	case "Replace":
		var c struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, err
		}
		return buildReplace(c.Pattern, c.Content)
	case "Sequence":
		var c struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, err
		}
		var steps []normalizer
		for _, n := range c.Normalizers {
			step, err := buildNormalizer(n)
			if err != nil {
				return nil, err
			}
			if step != nil {
				steps = append(steps, step)
			}
		}
		return func(s string) string {
			for _, step := range steps {
				s = step(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("unsupported normalizer type %q", kind)
}

// buildReplace handles the Replace normalizer: a literal or a regex
// replaced by literal content.
func buildReplace(p patternJSON, content string) (normalizer, error) {
	switch {
	case p.String != nil:
		old := *p.String
		return func(s string) string { return strings.ReplaceAll(s, old, content) }, nil
	case p.Regex != nil:
		re, err := regexp2.Compile(*p.Regex, regexp2.None)
		if err != nil {
			return nil, fmt.Errorf("replace pattern %q: %w", *p.Regex, err)
		}
		return func(s string) string {
			out, err := re.ReplaceFunc(s, func(regexp2.Match) string { return content }, -1, -1)
			if err != nil {
				// Only a match timeout can fail, and none is set.
				return s
			}
			return out
		}, nil
	}
	return nil, fmt.Errorf("replace pattern has neither String nor Regex")
}
