package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// SourceStats are a source's cumulative counts as of a point in the run.
type SourceStats struct {
	// Records is the number of records read (taken or skipped).
	Records int64 `json:"records"`
	// Documents and Tokens are what the mixer took, separators included;
	// LossTokens are the loss-ON ones among them.
	Documents  int64 `json:"documents"`
	Tokens     int64 `json:"tokens"`
	LossTokens int64 `json:"loss_tokens"`
	// Skipped counts records or documents left out, by reason: empty,
	// too_long, no_assistant, chat_error.
	Skipped map[string]int64 `json:"skipped,omitempty"`
	// ChatTurns counts trained assistant turns, SplitTurns those trained
	// in a document of their own, UnmaskedTurns those kept loss-OFF.
	ChatTurns     int64 `json:"chat_turns,omitempty"`
	SplitTurns    int64 `json:"split_turns,omitempty"`
	UnmaskedTurns int64 `json:"unmasked_turns,omitempty"`
	// Epochs is the number of passes started over the source's files.
	Epochs int `json:"epochs"`
	// Done says why the source stopped contributing: exhausted, max_tokens
	// or empty_epoch (a repeating source that yields no document); empty
	// while it still had data.
	Done string `json:"done,omitempty"`
}

// SkippedText lists the skipped counts for people, by reason in name
// order ("empty 560, too_long 3"); "none" when nothing was skipped.
func (s SourceStats) SkippedText() string {
	if len(s.Skipped) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(s.Skipped))
	for _, reason := range slices.Sorted(maps.Keys(s.Skipped)) {
		parts = append(parts, fmt.Sprintf("%s %d", reason, s.Skipped[reason]))
	}
	return strings.Join(parts, ", ")
}

// sourceCursor is where a source stands: the next document to take is
// document NextDoc of record NextRecord. With the stats, it is all a
// resumed run needs to continue the source exactly.
type sourceCursor struct {
	NextRecord   int64       `json:"next_record"`
	NextDoc      int         `json:"next_doc"`
	LastDocEpoch int         `json:"last_doc_epoch"`
	Stats        SourceStats `json:"stats"`
}

// partialDoc is a document the packer had started but not finished.
type partialDoc struct {
	Source int   `json:"source"`
	Record int64 `json:"record"`
	Doc    int   `json:"doc"`
	Offset int   `json:"offset"`
}

// resumeState is the run's state right after a shard was committed.
type resumeState struct {
	Sources []sourceCursor `json:"sources"`
	Partial *partialDoc    `json:"partial,omitempty"`
}

// mixSource is one source as the mixer sees it.
type mixSource struct {
	cfg     *SourceConfig
	cur     sourceCursor
	stream  *stream
	pending []doc // documents of record cur.NextRecord not yet taken
	epoch   int   // epoch of the pending record
	log     func(string)
	errs    int
	// seen and yielded count the records this run read and those that
	// gave a document, for the early check of yieldError; keys are the
	// fields of the first record without the configured one.
	seen, yielded int64
	keys          []string
	firstErr      string
}

// taken is a document handed to the packer, with where it came from.
type taken struct {
	src    int
	record int64
	doc    int
	d      doc
}

// mixer interleaves documents so that every source's share of the taken
// tokens follows its weight: it always takes from the source furthest
// behind its share (smallest tokens/weight; ties to the earlier source).
// This is deterministic, needs no look-ahead, and keeps the proportions
// within one document of exact at every point of the run, while every
// source has data. A source that runs out leaves the mix and the others
// continue, so the final shares then differ (the manifest records them);
// repeat and max_tokens control this.
type mixer struct {
	srcs []*mixSource
}

// next takes the next document; ok is false when every source is done.
func (m *mixer) next(ctx context.Context) (t taken, ok bool, err error) {
	for {
		best := -1
		for i, s := range m.srcs {
			if s.cur.Stats.Done != "" {
				// Stop reading ahead for a source that is done (capped by
				// max_tokens, say), so the others get the CPUs.
				if s.stream.stop != nil {
					s.stream.stop()
				}
				continue
			}
			if best < 0 || float64(s.cur.Stats.Tokens)/s.cfg.Weight < float64(m.srcs[best].cur.Stats.Tokens)/m.srcs[best].cfg.Weight {
				best = i
			}
		}
		if best < 0 {
			return t, false, nil
		}
		s := m.srcs[best]
		rec, sub := s.cur.NextRecord, s.cur.NextDoc
		d, ok, err := s.take(ctx)
		if err != nil {
			return t, false, err
		}
		if ok {
			return taken{src: best, record: rec, doc: sub, d: d}, true, nil
		}
	}
}

// fill makes sure pending holds the documents of record NextRecord,
// reading past records without documents; false when the source ends.
func (s *mixSource) fill(ctx context.Context) (bool, error) {
	for len(s.pending) == 0 {
		it, err := s.stream.next(ctx)
		if errors.Is(err, io.EOF) {
			s.cur.Stats.Done = "exhausted"
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if it.ord != s.cur.NextRecord {
			return false, fmt.Errorf("internal: source %q delivered record %d, expected %d", s.cfg.Name, it.ord, s.cur.NextRecord)
		}
		if it.epoch+1 > s.cur.Stats.Epochs {
			if it.epoch > 0 && s.cur.LastDocEpoch < it.epoch-1 {
				s.cur.Stats.Done = "empty_epoch"
				return false, nil
			}
			s.cur.Stats.Epochs = it.epoch + 1
		}
		if s.cur.NextDoc == 0 {
			s.count(it)
			// A source whose first records all yield nothing is
			// misconfigured (a chat source over plain text, a wrong
			// field): say so now, not after hours of packing the others.
			if s.seen++; len(it.docs) > 0 {
				s.yielded++
			}
			if s.seen == earlyCheckRecords && s.yielded == 0 {
				return false, s.yieldError()
			}
		}
		if s.cur.NextDoc > len(it.docs) {
			return false, fmt.Errorf("source %q: record %d has %d documents but the resume state says %d were taken; the data changed", s.cfg.Name, it.ord, len(it.docs), s.cur.NextDoc)
		}
		s.pending, s.epoch = it.docs[s.cur.NextDoc:], it.epoch
		if len(s.pending) == 0 {
			s.cur.NextRecord++
			s.cur.NextDoc = 0
		}
	}
	return true, nil
}

// take hands out the source's next document, unless the source is done.
func (s *mixSource) take(ctx context.Context) (doc, bool, error) {
	if ok, err := s.fill(ctx); !ok || err != nil {
		return doc{}, false, err
	}
	d := s.pending[0]
	st := &s.cur.Stats
	if s.cfg.MaxTokens > 0 && st.Tokens+int64(len(d.tokens)) > s.cfg.MaxTokens {
		st.Done = "max_tokens"
		return doc{}, false, nil
	}
	s.pending = s.pending[1:]
	s.cur.NextDoc++
	if len(s.pending) == 0 {
		s.cur.NextRecord++
		s.cur.NextDoc = 0
	}
	s.cur.LastDocEpoch = s.epoch
	st.Documents++
	st.Tokens += int64(len(d.tokens))
	st.LossTokens += int64(lossCount(d))
	return d, true, nil
}

// count adds a record's outcome to the stats, once per record.
func (s *mixSource) count(it *item) {
	st := &s.cur.Stats
	st.Records++
	for k, v := range it.skips {
		if st.Skipped == nil {
			st.Skipped = map[string]int64{}
		}
		st.Skipped[k] += int64(v)
	}
	if it.keys != nil && s.keys == nil {
		s.keys = it.keys
	}
	if it.err != "" && s.firstErr == "" {
		s.firstErr = it.err
	}
	st.ChatTurns += int64(it.chat.turns)
	st.SplitTurns += int64(it.chat.split)
	st.UnmaskedTurns += int64(it.chat.unmasked)
	// The first few template failures are shown: a systematic problem
	// (a role the template rejects) should be visible long before the
	// run ends, not only as a count in the manifest.
	if it.err != "" && s.errs < 5 && s.log != nil {
		s.errs++
		s.log(fmt.Sprintf("source %q record %d skipped: %s", s.cfg.Name, it.ord, it.err))
	}
}

// restorePartial re-reads the document a resumed run stopped inside and
// returns its unpacked remainder; the source's reader was told to skip to
// that record.
func (s *mixSource) restorePartial(ctx context.Context, p *partialDoc) (doc, error) {
	it, err := s.stream.next(ctx)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("source %q ended before record %d", s.cfg.Name, p.Record)
		}
		return doc{}, fmt.Errorf("resume: %w", err)
	}
	if it.ord != p.Record || p.Doc >= len(it.docs) || p.Offset >= len(it.docs[p.Doc].tokens) {
		return doc{}, fmt.Errorf("resume: source %q record %d no longer has the document the manifest records; the data changed", s.cfg.Name, p.Record)
	}
	d := it.docs[p.Doc]
	rest := doc{tokens: d.tokens[p.Offset:]}
	if d.loss != nil {
		rest.loss = d.loss[p.Offset:]
	}
	if it.ord == s.cur.NextRecord {
		if s.cur.NextDoc <= p.Doc || s.cur.NextDoc >= len(it.docs) {
			return doc{}, fmt.Errorf("resume: inconsistent state for source %q record %d", s.cfg.Name, p.Record)
		}
		s.pending, s.epoch = it.docs[s.cur.NextDoc:], it.epoch
	}
	return rest, nil
}

func lossCount(d doc) int {
	if d.loss == nil {
		return len(d.tokens)
	}
	n := 0
	for _, on := range d.loss {
		if on {
			n++
		}
	}
	return n
}

// earlyCheckRecords is how many records a source may read without a
// document before the run stops.
const earlyCheckRecords = 1000

// yieldError says why a source yields nothing, or loses most of its
// records to one cause (nil when it does neither): the field it looked for
// and what it found, and what to change.
func (s *mixSource) yieldError() error {
	st := s.cur.Stats
	if st.Records == 0 {
		if st.Done == "exhausted" {
			return fmt.Errorf("data: source %q: its files hold no records", s.cfg.Name)
		}
		return nil // not read yet: the run ended first
	}
	reason, n := "", int64(0)
	for _, r := range slices.Sorted(maps.Keys(st.Skipped)) {
		if st.Skipped[r] > n {
			reason, n = r, st.Skipped[r]
		}
	}
	if st.Documents > 0 && 2*n <= st.Records {
		return nil
	}
	if n == 0 {
		return fmt.Errorf("data: source %q: %d records gave no document", s.cfg.Name, st.Records)
	}
	head := fmt.Sprintf("data: source %q (kind %s, field %q): %d of %d records", s.cfg.Name, s.cfg.Kind, s.cfg.Field, n, st.Records)
	var why, fix string
	switch reason {
	case skipNoField:
		why = fmt.Sprintf("have no %q field (the first has: %s)", s.cfg.Field, strings.Join(s.keys, ", "))
		fix = "set field: to the key that holds the " + map[string]string{KindChat: "messages", KindText: "text"}[s.cfg.Kind]
		if s.cfg.Kind == KindChat && slices.Contains(s.keys, "text") {
			fix = "for plain text use kind: text (field text)"
		}
	case skipEmpty:
		why, fix = fmt.Sprintf("have an empty or null %q", s.cfg.Field), "check the files, or point field: at another key"
	case skipTooLong:
		why, fix = "are longer than max_doc_tokens", "raise max_doc_tokens, or leave it 0 to split long documents"
	case skipNoAssistant:
		why, fix = "have no assistant turn to train on", "chat sources need conversations that end in an assistant reply"
	case skipChatError:
		why, fix = "could not be rendered by the chat template (the first: "+s.firstErr+")", "check the messages' roles and shape"
	default:
		why = "were skipped: " + reason
	}
	return fmt.Errorf("%s %s; %s", head, why, fix)
}
