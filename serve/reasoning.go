package serve

import "strings"

// The tags that delimit a reasoning model's thoughts (Qwen3, MiniCPM5,
// DeepSeek-R1 and most others).
const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// promptOpensThink reports whether a rendered prompt ends inside an open
// <think> block, as templates that start the assistant's turn with
// "<think>\n" do: then everything generated up to </think> is reasoning.
func promptOpensThink(prompt string) bool {
	return strings.LastIndex(prompt, thinkOpen) > strings.LastIndex(prompt, thinkClose)
}

// splitState is where a splitter is in the generated text.
type splitState int

const (
	// splitDetect: nothing but whitespace seen; a leading <think> would
	// start reasoning.
	splitDetect splitState = iota
	splitReasoning
	splitContent
)

// splitter separates generated text into reasoning (inside <think>…</think>,
// tags dropped) and content, incrementally: what it returns is final, so a
// stream can send it at once. It holds back only what could still turn out
// to be a tag, the whitespace that opens a response (until it is clear no
// <think> follows), and trailing newlines of the reasoning (which are
// dropped if </think> follows). Streaming and whole responses go through
// the same splitter, so both split the same way.
type splitter struct {
	state        splitState
	buf          string // received, not yet returned
	heldNewlines string // trailing newlines of the reasoning so far
	afterThink   bool   // content follows a </think>
	reasoningOut bool   // some reasoning returned
	contentOut   bool   // some content returned
}

// newSplitter starts in reasoning when the prompt already opened <think>.
func newSplitter(inThink bool) *splitter {
	s := &splitter{}
	if inThink {
		s.state = splitReasoning
	}
	return s
}

// write adds text and returns the reasoning and content that are now
// final; with final set it returns everything left.
func (s *splitter) write(text string, final bool) (reasoning, content string) {
	s.buf += text
	var r, c strings.Builder
	for {
		switch s.state {
		case splitDetect:
			trimmed := strings.TrimLeft(s.buf, " \t\r\n")
			switch {
			case strings.HasPrefix(trimmed, thinkOpen):
				s.state = splitReasoning
				s.buf = trimmed[len(thinkOpen):]
				continue
			case !final && strings.HasPrefix(thinkOpen, trimmed):
				return r.String(), c.String() // could still become <think>
			}
			s.state = splitContent
			continue
		case splitReasoning:
			if i := strings.Index(s.buf, thinkClose); i >= 0 {
				s.emitReasoning(&r, s.buf[:i])
				s.heldNewlines = "" // newlines before </think> are layout
				s.buf = s.buf[i+len(thinkClose):]
				s.state, s.afterThink = splitContent, true
				continue
			}
			keep := 0
			if !final {
				keep = partialSuffix(s.buf, thinkClose)
			}
			s.emitReasoning(&r, s.buf[:len(s.buf)-keep])
			if final {
				s.heldNewlines = "" // an unfinished thought ends where it was cut
			}
			s.buf = s.buf[len(s.buf)-keep:]
			return r.String(), c.String()
		case splitContent:
			text := s.buf
			if s.afterThink && !s.contentOut {
				// The template writes "</think>\n\n" before the answer.
				text = strings.TrimLeft(text, "\n")
			}
			if text != "" {
				c.WriteString(text)
				s.contentOut = true
			}
			s.buf = ""
			return r.String(), c.String()
		}
	}
}

// emitReasoning appends text to r, dropping the newlines that open the
// reasoning and keeping trailing newlines back until more text follows.
func (s *splitter) emitReasoning(r *strings.Builder, text string) {
	if !s.reasoningOut {
		text = strings.TrimLeft(text, "\n")
	}
	if text == "" {
		return
	}
	body := strings.TrimRight(text, "\n")
	tail := text[len(body):]
	if body == "" {
		s.heldNewlines += tail
		return
	}
	r.WriteString(s.heldNewlines)
	r.WriteString(body)
	s.heldNewlines = tail
	s.reasoningOut = true
}

// partialSuffix is the length of the longest proper prefix of tag that s
// ends with: text that may be the start of tag.
func partialSuffix(s, tag string) int {
	for n := min(len(tag)-1, len(s)); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}
