package tokenizer

import "unicode/utf8"

// StreamDecoder turns ids arriving one by one into text, emitting only
// complete UTF-8 characters: a character split over several byte tokens
// is held back until its last byte arrives. It is HF's DecodeStream with a
// byte-level completeness test instead of looking for a trailing U+FFFD.
// A StreamDecoder is for one goroutine; the Tokenizer behind it is shared.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	ids         []int
	prefix      int // ids[prefix:read] were emitted; kept as left context
	read        int
}

// NewStreamDecoder starts decoding a new sequence.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Add appends one id and returns the text it completes, often "" while a
// character is still partial.
func (s *StreamDecoder) Add(id int) string {
	s.ids = append(s.ids, id)
	prev := s.t.decodeBytes(s.ids[s.prefix:s.read], s.skipSpecial)
	cur := s.t.decodeBytes(s.ids[s.prefix:], s.skipSpecial)
	// Decoding the previous ids again keeps context-dependent decoders
	// (Metaspace's first-token rule) consistent with a full Decode.
	if len(cur) <= len(prev) || partialTail(cur) {
		return ""
	}
	out := cur[len(prev):]
	s.ids = append(s.ids[:0], s.ids[s.read:]...)
	s.prefix, s.read = 0, len(s.ids)
	return lossyString(out)
}

// Flush returns whatever is held back, with incomplete characters replaced
// by U+FFFD, and resets the decoder.
func (s *StreamDecoder) Flush() string {
	prev := s.t.decodeBytes(s.ids[s.prefix:s.read], s.skipSpecial)
	cur := s.t.decodeBytes(s.ids[s.prefix:], s.skipSpecial)
	s.ids, s.prefix, s.read = s.ids[:0], 0, 0
	if len(cur) <= len(prev) {
		return ""
	}
	return lossyString(cur[len(prev):])
}

// partialTail reports whether b ends inside a UTF-8 sequence that more
// bytes could still complete. Invalid bytes do not count: they can never
// become valid, so they are emitted (as U+FFFD) rather than held forever.
func partialTail(b []byte) bool {
	start := len(b) - 1
	for start >= 0 && len(b)-start < utf8.UTFMax && b[start]&0xC0 == 0x80 {
		start--
	}
	if start < 0 {
		return false
	}
	// FullRune is false exactly for a valid but unfinished prefix.
	return !utf8.FullRune(b[start:])
}
