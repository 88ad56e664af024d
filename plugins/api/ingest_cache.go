package api

import (
	"sync"

	"github.com/speculapro/speculapro/internal/event"
)

// recentIDs remembers the last n accepted IDs so a resend arriving before
// the persister stored the item is still answered duplicate. It is per
// process and lost on restart; the stored-ID lookup covers the rest. Safe
// for concurrent use.
type recentIDs struct {
	mu   sync.Mutex
	set  map[event.UUID]struct{}
	ring []event.UUID // insertion order; the oldest is evicted first
	next int
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{set: make(map[event.UUID]struct{}, n), ring: make([]event.UUID, n)}
}

func (c *recentIDs) has(id event.UUID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.set[id]
	return ok
}

func (c *recentIDs) add(ids ...event.UUID) {
	if len(c.ring) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if _, ok := c.set[id]; ok {
			continue
		}
		if old := c.ring[c.next]; !old.IsZero() {
			delete(c.set, old)
		}
		c.ring[c.next] = id
		c.set[id] = struct{}{}
		c.next = (c.next + 1) % len(c.ring)
	}
}

