package apirequest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/event"
)

// Key cache sizes and lifetimes.
const (
	// keyTTL: a valid key is looked up again after a minute, so a revoked key
	// keeps working for up to a minute on a process that used it.
	keyTTL = time.Minute
	// unknownKeyTTL: a well-formed key no workspace holds costs one lookup
	// per 30 s, whoever presents it how often; a key created meanwhile works
	// at the latest 30 s after its first refused try.
	unknownKeyTTL = 30 * time.Second
	// keyCacheMax and unknownKeyCacheMax bound memory whatever keys clients
	// present (about 150 bytes an entry): the least recently used entry goes
	// first, the others stay.
	keyCacheMax        = 10000
	unknownKeyCacheMax = 100000
	// knownLookups and unknownLookups are the lookups that may run at once
	// for keys that were valid when last seen and for the rest: a flood of
	// random keys fills only the second lane, so clients whose entry expired
	// are still checked at once.
	knownLookups   = 4
	unknownLookups = 2
	// lookupWait is how long a request waits for a free lane before it is
	// answered 503.
	lookupWait = time.Second
)

// errLookupBusy: every lookup lane stayed busy for lookupWait.
var errLookupBusy = errors.New("too many API key lookups at once")

// lru is golang-lru's size-bound map (least recently used evicted) with an
// expiry per entry. An expired entry stays until replaced or evicted, as the
// lane of its next lookup depends on whether the key was valid when last
// seen; the library's expirable LRU drops it, so the expiry is kept here.
// Not safe for concurrent use: keyCache locks.
type lru[V any] struct {
	c *simplelru.LRU[string, lruEntry[V]]
}

type lruEntry[V any] struct {
	val     V
	expires time.Time
}

func newLRU[V any](max int) *lru[V] {
	c, err := simplelru.NewLRU[string, lruEntry[V]](max, nil)
	if err != nil {
		panic(fmt.Sprintf("key cache of size %d: %v", max, err)) // only a size ≤ 0, a constant here
	}
	return &lru[V]{c: c}
}

// get returns the value and whether it is still fresh; an expired entry is
// returned (fresh=false) until replaced or evicted.
func (c *lru[V]) get(key string, now time.Time) (v V, fresh, ok bool) {
	e, ok := c.c.Get(key)
	if !ok {
		return v, false, false
	}
	return e.val, now.Before(e.expires), true
}

func (c *lru[V]) put(key string, v V, expires time.Time) {
	c.c.Add(key, lruEntry[V]{val: v, expires: expires})
}

func (c *lru[V]) remove(key string) { c.c.Remove(key) }

func (c *lru[V]) len() int { return c.c.Len() }

// keyGrant is what a valid key names: its workspace and what it may do.
type keyGrant struct {
	ws     event.UUID
	scopes apikey.Scopes
}

// keyCache remembers which workspace a key hash belongs to (and the key's
// scopes) (an LRU of
// keyCacheMax with keyTTL) and which hashes no active workspace holds (an
// LRU of unknownKeyCacheMax with unknownKeyTTL), and runs the lookups of
// the rest in two bounded lanes. Safe for concurrent use.
type keyCache struct {
	mu      sync.Mutex
	known   *lru[keyGrant]
	unknown *lru[struct{}]
	flights map[string]*keyFlight // lookups running, by hash: one per key

	knownLane, unknownLane chan struct{}
	ttl, unknownTTL        time.Duration
	Lookups                atomic.Int64 // database round trips, for tests and metrics
}

// keyFlight is one running lookup; its waiters read ws and err after done.
type keyFlight struct {
	done chan struct{}
	ws   *keyGrant
	err  error
}

func NewKeyCache() *keyCache {
	return &keyCache{
		known: newLRU[keyGrant](keyCacheMax), unknown: newLRU[struct{}](unknownKeyCacheMax),
		flights:   map[string]*keyFlight{},
		knownLane: make(chan struct{}, knownLookups), unknownLane: make(chan struct{}, unknownLookups),
		ttl: keyTTL, unknownTTL: unknownKeyTTL,
	}
}

// resolve returns the workspace and scopes of a key hash: nil for a key no
// active workspace holds. lookup asks the database; it runs at most once at a time
// per hash, in the lane the hash's history picks.
func (c *keyCache) resolve(ctx context.Context, hash []byte, lookup func(context.Context, []byte) (*keyGrant, error)) (*keyGrant, error) {
	k := string(hash)
	now := time.Now()
	c.mu.Lock()
	ws, fresh, wasKnown := c.known.get(k, now)
	if fresh {
		c.mu.Unlock()
		return &ws, nil
	}
	if _, fresh, _ := c.unknown.get(k, now); fresh {
		c.mu.Unlock()
		return nil, nil
	}
	f, running := c.flights[k]
	if !running {
		f = &keyFlight{done: make(chan struct{})}
		c.flights[k] = f
	}
	c.mu.Unlock()
	if running {
		select {
		case <-f.done:
			return f.ws, f.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	lane := c.unknownLane
	if wasKnown {
		lane = c.knownLane
	}
	timer := time.NewTimer(lookupWait)
	defer timer.Stop()
	select {
	case lane <- struct{}{}:
		c.Lookups.Add(1)
		// Others may wait on this lookup: a client hanging up must not
		// fail it for them (lookup has its own timeout).
		f.ws, f.err = lookup(context.WithoutCancel(ctx), hash)
		<-lane
	case <-timer.C:
		f.err = errLookupBusy
	case <-ctx.Done():
		f.err = ctx.Err()
	}
	c.mu.Lock()
	delete(c.flights, k)
	switch {
	case f.err != nil:
	case f.ws == nil:
		c.known.remove(k)
		c.unknown.put(k, struct{}{}, time.Now().Add(c.unknownTTL))
	default:
		c.known.put(k, *f.ws, time.Now().Add(c.ttl))
	}
	c.mu.Unlock()
	close(f.done)
	if f.err != nil {
		return nil, fmt.Errorf("looking up an API key: %w", f.err)
	}
	return f.ws, nil
}

// SetTTL sets how long a known key is answered from the cache before it is
// looked up again (tests shorten it to make every request look its key up).
func (c *keyCache) SetTTL(d time.Duration) {
	c.mu.Lock()
	c.ttl = d
	c.mu.Unlock()
}
