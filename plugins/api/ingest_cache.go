package api

import (
	"sync"
	"time"

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

// keyCache remembers which workspace a key hash belongs to for keyTTL, so a
// busy client costs one key lookup a minute, not one per request. A revoked
// key therefore keeps working for up to keyTTL on a process that used it.
type keyCache struct {
	mu      sync.Mutex
	entries map[string]keyEntry
}

type keyEntry struct {
	ws      event.UUID
	expires time.Time
}

const (
	keyTTL = time.Minute
	// keyCacheMax bounds memory whatever keys clients present; only valid
	// keys are cached, so this is the number of live keys in use.
	keyCacheMax = 10000
)

func newKeyCache() *keyCache { return &keyCache{entries: map[string]keyEntry{}} }

func (c *keyCache) get(hash []byte) (event.UUID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[string(hash)]
	if !ok || time.Now().After(e.expires) {
		return event.UUID{}, false
	}
	return e.ws, true
}

func (c *keyCache) put(hash []byte, ws event.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= keyCacheMax {
		clear(c.entries)
	}
	c.entries[string(hash)] = keyEntry{ws: ws, expires: time.Now().Add(keyTTL)}
}
