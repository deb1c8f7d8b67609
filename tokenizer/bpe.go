package tokenizer

import (
	"fmt"
	"sync"
	"unicode/utf8"
)

// bpe is a BPE model. Byte-level models work on raw bytes (their vocabulary
// is spelled in GPT-2's byte alphabet, translated once at load); others work
// on UTF-8 characters, with optional <0xNN> byte fallback.
type bpe struct {
	vocab        map[string]int // as spelled in tokenizer.json
	byteLevel    bool
	byteIDs      [256]int32 // byte-level: id of each single byte, -1 if none
	fallbackIDs  [256]int32 // byte_fallback: id of <0xNN>, -1 if none
	byteFallback bool
	unk          int32 // -1 if none
	fuseUnk      bool
	ignoreMerges bool
	merges       map[uint64]mergeResult
	cache        *wordCache
}

type mergeResult struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newBPE(m modelJSON, byteLevel bool) (*bpe, error) {
	if m.Type != "" && m.Type != "BPE" {
		return nil, fmt.Errorf("unsupported model type %q (only BPE)", m.Type)
	}
	if deref(m.ContinuingSubwordPrefix) != "" || deref(m.EndOfWordSuffix) != "" {
		return nil, fmt.Errorf("BPE continuing_subword_prefix/end_of_word_suffix are unsupported")
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return nil, fmt.Errorf("BPE dropout is unsupported (encoding must be deterministic)")
	}
	b := &bpe{
		vocab:        m.Vocab,
		byteLevel:    byteLevel,
		byteFallback: m.ByteFallback,
		unk:          -1,
		fuseUnk:      m.FuseUnk,
		ignoreMerges: m.IgnoreMerges,
		cache:        newWordCache(),
	}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		b.unk = int32(id)
	}
	for i := range 256 {
		b.byteIDs[i], b.fallbackIDs[i] = -1, -1
		if id, ok := m.Vocab[string(byteToRune[i])]; ok && byteLevel {
			b.byteIDs[i] = int32(id)
		}
		if id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.fallbackIDs[i] = int32(id)
		}
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	b.merges = make(map[uint64]mergeResult, len(merges))
	for rank, pair := range merges {
		left, right := pair[0], pair[1]
		a, okA := m.Vocab[left]
		c, okC := m.Vocab[right]
		id, okID := m.Vocab[left+right]
		if !okA || !okC || !okID {
			return nil, fmt.Errorf("merge %d (%q %q) uses a token missing from the vocabulary", rank, left, right)
		}
		// A repeated pair keeps its last rank, as HF's map collection does.
		b.merges[pairKey(int32(a), int32(c))] = mergeResult{rank: int32(rank), id: int32(id)}
	}
	return b, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// appendWord appends the ids of one pre-tokenized word.
func (b *bpe) appendWord(dst []int, word string) []int {
	if b.byteLevel && len(word) == 1 && b.byteIDs[word[0]] >= 0 {
		return append(dst, int(b.byteIDs[word[0]]))
	}
	if ids, ok := b.cache.get(word); ok {
		for _, id := range ids {
			dst = append(dst, int(id))
		}
		return dst
	}
	ids := b.tokenize(word)
	b.cache.put(word, ids)
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst
}

// symbol is one node of the doubly linked list a word is merged on.
type symbol struct {
	id         int32
	prev, next int32
	size       int32 // byte length; 0 once merged into its left neighbour
}

type scratch struct {
	syms []symbol
	heap mergeHeap
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// tokenize runs BPE on one word, applying merges lowest rank first and
// leftmost first among equal ranks, as HF's Word::merge_all does.
func (b *bpe) tokenize(word string) []int32 {
	if b.ignoreMerges {
		key := word
		if b.byteLevel {
			key = byteLevelEncode(word)
		}
		if id, ok := b.vocab[key]; ok {
			return []int32{int32(id)}
		}
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	syms := b.initialSymbols(sc.syms[:0], word)
	sc.syms = syms
	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := b.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(uint64(m.rank)<<32 | uint64(i))
		}
	}
	for len(h) > 0 {
		top := h.pop()
		rank, pos := int32(top>>32), int32(uint32(top))
		left := &syms[pos]
		if left.size == 0 || left.next < 0 {
			continue
		}
		right := &syms[left.next]
		m, ok := b.merges[pairKey(left.id, right.id)]
		if !ok || m.rank != rank {
			continue // stale: a neighbour changed since this was queued
		}
		left.id = m.id
		left.size += right.size
		right.size = 0
		left.next = right.next
		if left.next >= 0 {
			syms[left.next].prev = pos
			if m2, ok := b.merges[pairKey(left.id, syms[left.next].id)]; ok {
				h.push(uint64(m2.rank)<<32 | uint64(pos))
			}
		}
		if left.prev >= 0 {
			if m2, ok := b.merges[pairKey(syms[left.prev].id, left.id)]; ok {
				h.push(uint64(m2.rank)<<32 | uint64(left.prev))
			}
		}
	}
	sc.heap = h
	var out []int32
	for i := int32(0); i >= 0 && int(i) < len(syms); i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

// initialSymbols splits a word into its starting units: bytes for
// byte-level models, characters (or their <0xNN> bytes, or unk) otherwise.
// Units with no id are dropped, as HF does when there is no unk token.
func (b *bpe) initialSymbols(syms []symbol, word string) []symbol {
	add := func(id int32, size int) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1, size: int32(size)})
	}
	if b.byteLevel {
		for i := 0; i < len(word); i++ {
			if id := b.byteIDs[word[i]]; id >= 0 {
				add(id, 1)
			} else if b.unk >= 0 {
				add(b.unk, 1)
			}
		}
	} else {
		lastUnk := false
		for i := 0; i < len(word); {
			_, w := utf8.DecodeRuneInString(word[i:])
			unit := word[i : i+w]
			i += w
			if id, ok := b.vocab[unit]; ok {
				add(int32(id), w)
				lastUnk = false
				continue
			}
			if b.byteFallback && b.hasFallback(unit) {
				for j := 0; j < len(unit); j++ {
					add(b.fallbackIDs[unit[j]], 1)
				}
				lastUnk = false
				continue
			}
			if b.unk < 0 {
				continue
			}
			if b.fuseUnk && lastUnk {
				syms[len(syms)-1].size += int32(w)
				continue
			}
			add(b.unk, w)
			lastUnk = true
		}
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	return syms
}

func (b *bpe) hasFallback(unit string) bool {
	for j := 0; j < len(unit); j++ {
		if b.fallbackIDs[unit[j]] < 0 {
			return false
		}
	}
	return true
}

// mergeHeap is a binary min-heap of rank<<32|position, so that ties in
// rank pop leftmost first.
type mergeHeap []uint64

func (h *mergeHeap) push(v uint64) {
	*h = append(*h, v)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *mergeHeap) pop() uint64 {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l] < s[m] {
			m = l
		}
		if r < len(s) && s[r] < s[m] {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
