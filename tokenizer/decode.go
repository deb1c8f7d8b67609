package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// decoder maps token spellings to output, one HF decode_chain step. It
// works on bytes rather than strings so that a partial UTF-8 character
// survives until the streaming decoder can see whether it completes; the
// final text is made valid only at the end (see lossyString).
type decoder func(tokens [][]byte) [][]byte

// buildDecoder compiles tokenizer.json's "decoder"; nil means HF's default
// of joining tokens with spaces.
func buildDecoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	kind, err := typed(raw)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "ByteLevel":
		return decodeByteLevel, nil
	case "ByteFallback":
		return perToken(decodeByteFallback), nil
	case "Fuse":
		return func(tokens [][]byte) [][]byte { return [][]byte{bytes.Join(tokens, nil)} }, nil
	case "Replace":
		var c struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, err
		}
		if c.Pattern.String == nil {
			return nil, fmt.Errorf("Replace decoder: only String patterns are supported")
		}
		old, repl := []byte(*c.Pattern.String), []byte(c.Content)
		return perToken(func(tok []byte) []byte { return bytes.ReplaceAll(tok, old, repl) }), nil
	case "Strip":
		var c struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, err
		}
		return perToken(func(tok []byte) []byte { return stripToken(tok, c.Content, c.Start, c.Stop) }), nil
	case "Metaspace":
		var c struct {
			Replacement    string `json:"replacement"`
			PrependScheme  string `json:"prepend_scheme"`
			AddPrefixSpace *bool  `json:"add_prefix_space"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, err
		}
		repl := []byte(c.Replacement)
		stripFirst := metaspaceScheme(c.PrependScheme, c.AddPrefixSpace) != "never"
		return func(tokens [][]byte) [][]byte {
			out := make([][]byte, len(tokens))
			for i, tok := range tokens {
				// HF drops every replacement rune of the first token, not
				// only a leading one.
				space := []byte(" ")
				if i == 0 && stripFirst {
					space = nil
				}
				out[i] = bytes.ReplaceAll(tok, repl, space)
			}
			return out
		}, nil
	case "Sequence":
		var c struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, err
		}
		var steps []decoder
		for _, d := range c.Decoders {
			step, err := buildDecoder(d)
			if err != nil {
				return nil, err
			}
			if step != nil {
				steps = append(steps, step)
			}
		}
		return func(tokens [][]byte) [][]byte {
			for _, step := range steps {
				tokens = step(tokens)
			}
			return tokens
		}, nil
	}
	return nil, fmt.Errorf("unsupported decoder type %q", kind)
}

func perToken(f func([]byte) []byte) decoder {
	return func(tokens [][]byte) [][]byte {
		out := make([][]byte, len(tokens))
		for i, tok := range tokens {
			out[i] = f(tok)
		}
		return out
	}
}

// decodeByteLevel undoes GPT-2's byte alphabet; a token with runes outside
// it (an added token such as "<|im_end|>" is inside, but not every one is)
// passes through as its UTF-8 spelling, as in HF.
func decodeByteLevel(tokens [][]byte) [][]byte {
	var out []byte
	for _, tok := range tokens {
		if raw, ok := byteLevelDecode(string(tok)); ok {
			out = append(out, raw...)
		} else {
			out = append(out, tok...)
		}
	}
	return [][]byte{out}
}

// decodeByteFallback turns a <0xNN> token into its byte. HF replaces an
// invalid run of such bytes by one U+FFFD per byte; here invalid bytes are
// left for lossyString, which differs only on malformed output.
func decodeByteFallback(tok []byte) []byte {
	if len(tok) == 6 && bytes.HasPrefix(tok, []byte("<0x")) && tok[5] == '>' {
		if b, err := strconv.ParseUint(string(tok[3:5]), 16, 8); err == nil {
			return []byte{byte(b)}
		}
	}
	return tok
}

// stripToken removes up to start leading and stop trailing copies of the
// one-character content, as HF's Strip decoder does per token.
func stripToken(tok []byte, content string, start, stop int) []byte {
	for ; start > 0 && bytes.HasPrefix(tok, []byte(content)); start-- {
		tok = tok[len(content):]
	}
	for ; stop > 0 && bytes.HasSuffix(tok, []byte(content)); stop-- {
		tok = tok[:len(tok)-len(content)]
	}
	return tok
}

// Decode returns the text of ids. Unknown ids are skipped; with skipSpecial
// so are added tokens marked special (HF's skip_special_tokens).
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	return lossyString(t.decodeBytes(ids, skipSpecial))
}

func (t *Tokenizer) decodeBytes(ids []int, skipSpecial bool) []byte {
	tokens := make([][]byte, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.Token(id)
		if !ok || skipSpecial && t.IsSpecial(id) {
			continue
		}
		tokens = append(tokens, []byte(tok))
	}
	if t.decoder == nil {
		return bytes.Join(tokens, []byte(" "))
	}
	return bytes.Join(t.decoder(tokens), nil)
}

// lossyString converts bytes to valid UTF-8 like Rust's
// String::from_utf8_lossy (which HF uses): each maximal invalid
// subsequence becomes one U+FFFD.
func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var out []byte
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			out = append(out, b[i:i+w]...)
			i += w
			continue
		}
		out = append(out, "\uFFFD"...)
		i += invalidPrefixLen(b[i:])
	}
	return string(out)
}

// invalidPrefixLen is the length of the maximal prefix of b that could
// start a valid UTF-8 sequence (at least 1), the unit Rust replaces.
func invalidPrefixLen(b []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	var need int
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 2
	case c >= 0xE0 && c <= 0xEF:
		need = 3
		if c == 0xE0 {
			lo = 0xA0
		} else if c == 0xED {
			hi = 0x9F
		}
	case c >= 0xF0 && c <= 0xF4:
		need = 4
		if c == 0xF0 {
			lo = 0x90
		} else if c == 0xF4 {
			hi = 0x8F
		}
	default:
		return 1
	}
	n := 1
	if n < len(b) && b[n] >= lo && b[n] <= hi {
		n++
		for n < need && n < len(b) && b[n] >= 0x80 && b[n] <= 0xBF {
			n++
		}
	}
	return n
}
