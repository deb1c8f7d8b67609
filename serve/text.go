package serve

import (
	"strings"
	"unicode/utf8"

	"dllm/tokenizer"
)

// textStream turns committed ids into text that is safe to send: special
// tokens dropped (except the think tags, which the reasoning split needs),
// only complete UTF-8 characters, cut at the first stop string, and with a
// tail held back that could still become the start of a stop string.
type textStream struct {
	dec     *tokenizer.StreamDecoder
	keep    func(id int) bool
	stops   []string
	hold    int // longest stop string minus one byte
	text    strings.Builder
	sent    int // bytes of text handed out
	stopped bool
}

func newTextStream(tok *tokenizer.Tokenizer, keep func(int) bool, stops []string) *textStream {
	t := &textStream{dec: tok.NewStreamDecoder(false), keep: keep, stops: stops}
	for _, s := range stops {
		t.hold = max(t.hold, len(s)-1)
	}
	return t
}

// add decodes ids and returns the text that became final; stopped reports
// that a stop string was found, after which nothing more is accepted.
func (t *textStream) add(ids []int64) (delta string, stopped bool) {
	if t.stopped {
		return "", true
	}
	var piece strings.Builder
	for _, id := range ids {
		if t.keep(int(id)) {
			piece.WriteString(t.dec.Add(int(id)))
		}
	}
	return t.append(piece.String(), false)
}

// finish flushes the decoder and returns all text not yet handed out.
func (t *textStream) finish() (delta string, stopped bool) {
	if t.stopped {
		return "", true
	}
	return t.append(t.dec.Flush(), true)
}

func (t *textStream) append(s string, final bool) (string, bool) {
	old := t.text.Len()
	t.text.WriteString(s)
	full := t.text.String()
	// A stop string ending in the new text starts at most hold bytes before it.
	if cut := firstStop(full, max(0, old-t.hold), t.stops); cut >= 0 {
		full = full[:cut]
		t.text.Reset()
		t.text.WriteString(full)
		t.stopped, final = true, true
	}
	end := len(full)
	if !final {
		end = max(t.sent, end-t.hold)
		for end > t.sent && end < len(full) && !utf8.RuneStart(full[end]) {
			end--
		}
	}
	delta := full[t.sent:end]
	t.sent = end
	return delta, t.stopped
}

// String is all text decoded so far, cut at a stop string if one was found.
func (t *textStream) String() string { return t.text.String() }

// firstStop is the earliest index at or after from where one of stops
// begins, or -1.
func firstStop(s string, from int, stops []string) int {
	best := -1
	for _, stop := range stops {
		if i := strings.Index(s[from:], stop); i >= 0 && (best < 0 || from+i < best) {
			best = from + i
		}
	}
	return best
}
