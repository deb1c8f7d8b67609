package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
)

// wordCache memoises BPE results per pre-tokenized word. Natural text is
// Zipfian, so a bounded cache catches most words; each shard is simply
// emptied when full, which keeps memory bounded without LRU bookkeeping
// and lets the cache follow a drifting corpus.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

const (
	cacheShards      = 64
	cacheShardSize   = 2048
	cacheMaxWordSize = 128 // longer words are rare and would crowd the cache
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func newWordCache() *wordCache {
	return &wordCache{seed: maphash.MakeSeed()}
}

func (c *wordCache) shard(word string) *cacheShard {
	return &c.shards[maphash.String(c.seed, word)%cacheShards]
}

func (c *wordCache) get(word string) ([]int32, bool) {
	if len(word) > cacheMaxWordSize {
		return nil, false
	}
	s := c.shard(word)
	s.mu.RLock()
	ids, ok := s.m[word]
	s.mu.RUnlock()
	return ids, ok
}

// put stores ids, which the caller must not modify afterwards.
func (c *wordCache) put(word string, ids []int32) {
	if len(word) > cacheMaxWordSize {
		return
	}
	s := c.shard(word)
	s.mu.Lock()
	if s.m == nil || len(s.m) >= cacheShardSize {
		s.m = make(map[string][]int32, cacheShardSize)
	}
	// Clone the key: word may point into a caller's much larger string.
	s.m[strings.Clone(word)] = ids
	s.mu.Unlock()
}
