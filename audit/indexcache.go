package audit

import (
	"container/list"
	"crypto/sha256"
	"sync"
)

// indexCacheBytes bounds the index bytes a trail keeps in memory for its queries (a 64 MiB
// segment's index is about 3 MiB).
const indexCacheBytes = 64 << 20

// indexCache keeps the bytes of the sealed indexes queries read last, each after it was checked
// against its seal, so a hot query neither reads nor hashes an index again, and a file changed
// since cannot reach it. It holds the most recently used ones up to a byte bound. Safe for
// concurrent use; the bytes it returns are shared and never written.
type indexCache struct {
	mu    sync.Mutex
	max   int
	size  int
	order list.List // of *cachedIndex, most recently used first
	byKey map[cacheKey]*list.Element
}

// cacheKey names an index by its segment and the hash it was checked against, so an entry only
// ever answers for the index sealed.
type cacheKey struct {
	segment string
	sum     [sha256.Size]byte
}

type cachedIndex struct {
	key  cacheKey
	data []byte
}

func newIndexCache(max int) *indexCache {
	return &indexCache{max: max, byKey: map[cacheKey]*list.Element{}}
}

// get returns the checked bytes of the index of segment sealed as sum, or nil.
func (c *indexCache) get(segment string, sum [sha256.Size]byte) []byte {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byKey[cacheKey{segment, sum}]
	if e == nil {
		return nil
	}
	c.order.MoveToFront(e)
	return e.Value.(*cachedIndex).data
}

// put keeps data, the bytes of the index of segment, which the caller checked hash to sum.
func (c *indexCache) put(segment string, sum [sha256.Size]byte, data []byte) {
	if c == nil || len(data) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{segment, sum}
	if c.byKey[k] != nil {
		return
	}
	c.byKey[k] = c.order.PushFront(&cachedIndex{k, data})
	c.size += len(data)
	for c.size > c.max {
		old := c.order.Remove(c.order.Back()).(*cachedIndex)
		delete(c.byKey, old.key)
		c.size -= len(old.data)
	}
}
