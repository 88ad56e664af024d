package features

import (
	"encoding/binary"
	"sync"
	"unsafe"
)

// cache keeps, between batches, entities as this process last wrote (or
// read) them, with the generation and lengths of Redis' value, so that a
// batch does not read again what the process already has: a small
// entity's value (Redis' own, or once the entity was appended to, its state
// encoded whole at Redis' generation: Store.keepFor), which the batch
// decodes again, and a large one's decoded state (decodedFrom), which the batch
// computes on as the batch before it left it (doc.go "Apply"). Decoding
// each touched entity's whole value every batch would be a fifth of the
// stream's CPU, nearly all of it for the few busy entities (a counterparty
// paid by thousands of accounts) touched by every batch; those stay
// decoded. All stay least recently used first out, within max bytes as
// estimated by (*state).size or the value's capacity.
// It is only ever a guess: the write's CAS compares the generation, and an
// entity somebody else wrote since is read again and recomputed, exactly as
// after a lost race. An entity only read in a batch (a counterparty paying
// in) is not written, so no CAS would check a cached state of it: load
// compares its generation in Redis (GETRANGE, 8 bytes) with the cache's
// instead, and reads it whole only when they differ.
//
// A state or value in the cache belongs to the cache: take moves it out to
// the one batch that holds the entity, which computes on it in place (a
// value: writes the new one over it) and
// publishes it again (nobody else can see it meanwhile); a batch that
// fails or loses its write drops it, and one whose value does not decode
// (never expected) drops it and reads the entity from Redis instead.
//
// A batch holds the entities it writes while it computes them: another
// batch of the same process that needs a large one (waitBytes or more)
// waits until all of those are free (all at once: no batch holds some
// while waiting for others, so none waits forever); a small one it reads
// from Redis, and the CAS sorts out which of the two writes first. Once computed, the batch publishes the new states
// to the cache and lets go, so the next batch computes on them while this
// one is written; writes then go to Redis one batch after the other, in
// the order the batches published, so a batch's CAS expects exactly what
// the batch before it writes. A write that fails or is lost drops the
// states it published (a batch that computed on them fails its own CAS and
// reads again).
type cache struct {
	max  int64 // negative: keep nothing (entities are still held)
	mu   sync.Mutex
	free *sync.Cond // signalled when a batch releases its entities
	// m is every entity the cache knows: those with a state in the ring
	// and those a batch holds (both at once only on a retry, which takes
	// no cached state). One entry an entity, found once a batch (take),
	// so a batch costs one map lookup an entity, not the seven a map of
	// states and a map of holds would take (take and publish would be 6.6 %
	// of BenchmarkApplyLoadgen's CPU samples).
	m     map[entityID]*cached
	held  int // entries held by a batch now
	bytes int64
	// lru is the ring of cached states, most recently published first
	// (lru.next), least recently last (lru.prev): evicted first.
	lru cached
	// next is the turn the next publishing batch gets; turn the one
	// writing now.
	next, turn uint64
}

type cached struct {
	eid entityID
	// key is the entity's Redis key (Store.key), built once for as long
	// as the entry lives ("" until its first publish); skey its snapshot
	// string of slot skeyN (snapKey), which changes every snapSlot.
	key   string
	skey  string
	skeyN int64
	// holder is the value length of the batch holding the entity, -1
	// when none does.
	holder int
	inRing bool
	gen    string
	// st is the decoded state of a large entity (one whose value is at
	// least decodedFrom bytes); val is the value of any other (Redis', or
	// the same state encoded whole: Store.keepFor), decoded by the batch
	// that takes it (decodedKept).
	st         *state
	val        []byte
	size       int64
	vlen, blen int   // the value's length in Redis, its base's
	goff       int   // where gen is (genAt)
	v3         bool  // the value is in formatVersion: a record may be appended
	ttlAt      int64 // when this process last set the key's TTL (unix ms)
	prev, next *cached
}

// waitBytes: a batch waits for an entity another batch holds from this
// size on, rather than read it again.
const waitBytes = 16 << 10

// decodedFrom is the value length from which the cache keeps an entity's
// decoded state rather than its value. A decoded state takes about four
// times its value's bytes (at 500k events of loadgen's traffic, 22,317
// cached entities: 134 MB of states as estimated, 196 MB of live heap,
// against 36 MB of values), holds a dozen pointers where a value holds
// one, and the collector would mark the cache's states on every cycle:
// about a fifth of the stream's CPU. Decoding a small value again costs little;
// a large one is a busy entity (a counterparty paid by thousands of
// accounts) that nearly every batch touches, whose decode every batch is
// what the cache of decoded states saves (doc.go "Apply").
const decodedFrom = 16 << 10

// cachedOverhead estimates a value entry's bytes beyond its value and keys:
// the entry itself and its share of the map.
const cachedOverhead = 200

// decodedKept says whether the cache keeps the decoded state of a value of
// vlen bytes (else the value itself).
func decodedKept(vlen int) bool { return vlen >= decodedFrom }

func newCache(max int64) *cache {
	c := &cache{max: max, m: map[entityID]*cached{}}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	c.free = sync.NewCond(&c.mu)
	return c
}

// unring takes x's state out of the ring (its entry stays while held).
func (c *cache) unring(x *cached) {
	x.prev.next, x.next.prev = x.next, x.prev
	x.prev, x.next = nil, nil
	x.inRing, x.st, x.val = false, nil, nil
	c.bytes -= x.size
	if x.holder < 0 {
		delete(c.m, x.eid)
	}
}

// drop takes x's state out of the ring for good: nobody reads that state
// again (it belongs to the cache until taken), so its arena goes to the
// next decode. take, which hands the state to a batch, unrings instead.
func (c *cache) drop(x *cached) {
	st := x.st
	c.unring(x)
	st.recycle()
}

func (c *cache) pushFront(x *cached) {
	x.prev, x.next = &c.lru, c.lru.next
	c.lru.next.prev = x
	c.lru.next = x
	x.inRing = true
	c.bytes += x.size
}

// release ends a batch's hold on x; an entry with no state in the ring
// goes.
func (c *cache) release(x *cached) {
	x.holder = -1
	c.held--
	if !x.inRing {
		delete(c.m, x.eid)
	}
}

// take holds ents (those it writes: not those only read), waiting until
// no other batch holds any of them, and with fromCache moves each one's
// cached state (if any) into the entity.
func (c *cache) take(ents []*entity, fromCache bool) {
	for _, e := range ents {
		e.ro, e.cx = readOnly(e), nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Wait for the large entities another batch holds (on a retry, for
	// all): reading one again would cost its whole value. A small one is
	// read from Redis instead, at the price of a CAS that may fail.
	for busy := c.held > 0; busy; {
		busy = false
		for _, e := range ents {
			if x, ok := c.m[e.eid]; ok && x.holder >= 0 && (!fromCache || x.holder >= waitBytes) && !e.ro {
				busy = true
				c.free.Wait()
				break
			}
		}
	}
	for _, e := range ents {
		x, ok := c.m[e.eid]
		if ok && e.key == "" {
			e.key = x.key
		}
		if e.ro && (!ok || !fromCache || !x.inRing || x.holder >= 0) {
			continue // read from Redis
		}
		// (An entity only read that the cache holds is taken like the
		// others; load checks its generation in Redis: entity.check.)
		e.check = e.ro
		if !ok {
			x = &cached{eid: e.eid}
			c.m[e.eid] = x
		} else if x.holder >= 0 {
			continue // small, held by another batch: read
		}
		e.cx = x
		x.holder = 0
		c.held++
		if !x.inRing || !fromCache {
			continue
		}
		st, val := x.st, x.val
		c.unring(x)
		x.holder = x.vlen
		e.hit, e.gen, e.exists, e.vlen, e.blen, e.ttlAt = true, x.gen, true, x.vlen, x.blen, x.ttlAt
		e.goff, e.v3 = x.goff, x.v3
		e.st, e.cval = st, val
	}
}

func readOnly(e *entity) bool {
	for _, o := range e.ops {
		if o.mode != modeRead {
			return false
		}
	}
	return true
}

// abort lets go of ents without publishing anything.
func (c *cache) abort(ents []*entity) {
	c.mu.Lock()
	for _, e := range ents {
		if e.cx != nil {
			c.release(e.cx)
			e.cx = nil
		}
	}
	c.mu.Unlock()
	c.free.Broadcast()
}

// publish puts every entity's new state (the one Redis will hold at its
// new generation once written) in the cache, lets go of ents, and returns
// the batch's turn to write (each entity's size estimated by compute).
func (c *cache) publish(ents []*entity) uint64 {
	c.mu.Lock()
	// The batch's busiest entities go in last, most recent: a batch that
	// overflows the budget evicts the ones it touched once first, and an
	// entity every batch touches many times (a counterparty paid by
	// thousands) stays.
	// (Every entity is in one band: none stays held.)
	lo := -1
	for _, up := range publishOrder {
		for _, e := range ents {
			if n := len(e.ops); n > lo && n <= up {
				c.put(e)
			}
		}
		lo = up
	}
	// Least recently published first; a batch larger than the budget
	// evicts its own states too.
	for c.bytes > c.max && c.lru.prev != &c.lru {
		c.drop(c.lru.prev)
	}
	turn := c.next
	c.next++
	c.mu.Unlock()
	c.free.Broadcast()
	return turn
}

// publishOrder: publish's bands of an entity's events in the batch, each
// up to its bound, fewest first.
var publishOrder = []int{1, 4, 16, 64, 256, 1024, 1 << 62}

// put publishes e (publish holds the lock).
func (c *cache) put(e *entity) {
	x := e.cx
	e.cx = nil
	gen, vlen, blen, goff, v3 := e.gen, e.vlen, e.blen, e.goff, e.v3
	switch {
	case e.changed && e.appended:
		gen, vlen, goff = e.newGen(), e.vlen+len(e.val), -genLen
	case e.changed:
		gen, vlen, blen, goff, v3 = e.newGen(), len(e.val), len(e.val), -genLen, true
	}
	keep := c.max >= 0 && gen != "" && (e.st != nil || e.cval != nil) && e.corrupt == nil
	switch {
	case x == nil:
		// Not held (only read, or read while another batch held it):
		// another batch may have published a newer value, or hold one.
		if _, ok := c.m[e.eid]; ok || !keep {
			return
		}
		x = &cached{eid: e.eid, key: e.key, holder: -1}
		c.m[e.eid] = x
	case !keep:
		c.release(x) // no key in Redis, or nothing readable
		return
	case x.inRing && (x.st != e.st || x.st == nil):
		// Held on a retry, which leaves the entry's old state or value in
		// the ring (take without fromCache): the new one replaces it.
		c.drop(x)
	case x.inRing:
		// The very state being published: take unrings what it hands
		// out, so this does not happen, but if it did the state lives on
		// and its arena must not be recycled.
		c.unring(x)
	}
	if x.key == "" {
		x.key = e.key
	}
	x.gen, x.st, x.val, x.size, x.vlen, x.blen, x.goff, x.v3, x.ttlAt = gen, e.st, e.cval, e.size, vlen, blen, goff, v3, e.ttlAt
	// The value now belongs to the cache (e's pooled arrays must not
	// reach the next batch's entity).
	e.cval = nil
	c.pushFront(x)
	if x.holder >= 0 {
		c.release(x)
	}
}

// waitTurn returns once every batch that published before turn has
// written (or failed).
func (c *cache) waitTurn(turn uint64) {
	c.mu.Lock()
	for c.turn != turn {
		c.free.Wait()
	}
	c.mu.Unlock()
}

// done ends turn's write.
func (c *cache) done(turn uint64) {
	c.mu.Lock()
	c.turn = turn + 1
	c.mu.Unlock()
	c.free.Broadcast()
}

// invalidate drops the states ents published, where no later batch has
// replaced them: their write failed or was lost.
func (c *cache) invalidate(ents []*entity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range ents {
		if !e.changed {
			continue
		}
		if x, ok := c.m[e.eid]; ok && x.inRing && x.gen == e.newGen() {
			c.drop(x)
		}
	}
}

// newGen is the generation e's write gives its value: its last 8 bytes
// (codec.go), of a whole value as of an appended record.
func (e *entity) newGen() string {
	return string(e.val[len(e.val)-genLen:])
}

// keepFor readies what the cache will keep of e (cache.go), here on the
// batch's goroutines rather than under the cache's lock: a large entity's
// decoded state, any other's value as Redis will hold it once written (its
// state's arena then goes to the next decode at once, so a batch's decoded
// states are not all alive together), and its measure.
func (s *Store) keepFor(e *entity) {
	st := e.st
	vlen := e.vlen
	switch {
	case e.changed && e.appended:
		vlen += len(e.val)
	case e.changed:
		vlen = len(e.val)
	}
	// old is the value e was decoded from, kept as it is when e did not
	// change (a state the cache held decoded has none).
	var old []byte
	switch {
	case e.hit:
		old = e.cval
	case e.exists:
		old = unsafe.Slice(unsafe.StringData(e.base), len(e.base))
	}
	if decodedKept(vlen) || (!e.changed && old == nil) {
		// Large, or a state from the cache that did not change.
		e.cval = nil
		e.size = st.size() + int64(len(e.key)) + 160
		return
	}
	switch {
	case e.changed && !e.appended:
		e.cval = append(reuse(e.cval, len(e.val)), e.val...)
	case e.changed:
		// Redis' value gains a delta record; the cache's is the state
		// encoded whole at the same generation, which decodes to the same
		// state without applying the records again: they would be two
		// fifths of what decoding the cache's values costs.
		gen := binary.BigEndian.Uint64(e.val[len(e.val)-genLen:])
		buf := e.cval[:0]
		if !e.hit {
			buf = make([]byte, 0, e.blen+e.blen/4+64)
		}
		e.cval = encode(buf, gen, st)
	case !e.hit:
		// old is go-redis' reply string: copied, never written to.
		e.cval = append(make([]byte, 0, len(old)), old...)
	}
	st.free()
	e.st = nil
	e.size = int64(cap(e.cval)+len(e.key)+len(e.skey)) + cachedOverhead
}
