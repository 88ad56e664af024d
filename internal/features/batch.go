package features

import (
	"fmt"
	"sync"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// prep is what Apply needs of one event, computed once.
type prep struct {
	at    int64 // occurred_at, unix s
	in    bool
	units int64
	sum   bool // units are summed (false: amount beyond ±10^11, see doc.go)
	acct  event.UUID
	cp    event.UUID
	hasCP bool
	idh   uint64 // hash of the event id (replay memory)
}

// Modes of an event on an entity.
const (
	modeTxn   = 't' // count a transaction
	modeEvent = 'e' // count an account event
	modeRead  = 'r' // read only (a counterparty paying in)
)

type op struct {
	ev   int
	mode byte
}

// entity is the work of a batch on one entity: its events in order, its
// value as read, its state after them.
type entity struct {
	eid entityID
	// key is the entity's Redis key, from its cache entry or built once
	// per batch (Store.key).
	key string
	// skey is the snapshot string this batch's snapshots go to (snapKey
	// of their expiry's slot), skeyAt when it expires (unix ms).
	skey   string
	skeyAt int64
	ops    []op
	// base is the value as read (a base and the delta records after it,
	// delta.go), until decoded; a state taken from the cache has none.
	base   string
	exists bool
	gen    string // the generation read (genAt), "" for none
	// goff is where GETRANGE reads gen (genAt: 0 or -8); v3 says the value
	// read is in formatVersion, so a record may be appended to it (one in
	// an older format is written whole).
	goff int
	v3   bool
	// hit: the value came from the cache instead of Redis; the write's
	// CAS checks it is still current, or, for an entity only read (check),
	// load compares its generation in Redis (the cache's state is then
	// dropped and the entity read when they differ).
	hit   bool
	check bool
	// cx: the cache's entry this batch holds the entity by (cache.go),
	// nil when it holds none; ro: the batch only reads it.
	cx      *cached
	ro      bool
	corrupt error // the value as read did not decode: counted from empty
	st      *state
	// cval is the value the cache held (cache.go: a small entity's), until
	// compute decodes it; then the value for the cache to keep once this
	// batch writes (Store.keepFor: Redis' new value, or the state it
	// decodes to encoded whole).
	cval []byte
	// reread: the cache's value did not decode; the batch reads the
	// entity from Redis instead of counting it from empty (ApplyValues).
	reread  bool
	changed bool
	// vlen and blen are the value's length in Redis and its base's (the
	// delta records follow the base); d is this batch's record; appended
	// says val is that record and the new generation, to append.
	vlen, blen int
	d          delta
	appended   bool
	val        []byte // the value to write
	// snaps are the snapshots of the events counted (doc.go "Replays"),
	// replays the events it had counted before.
	snaps   []snap
	replays []counted
	arena   []byte
	// ttlAt is when (unix ms) this process last set the key's TTL, as far
	// as the cache knows (0: not known); refreshTTL says this write sets
	// it (an append otherwise leaves it, keyTTLRefresh).
	ttlAt      int64
	refreshTTL bool
	// size estimates st's memory for the cache (cache.go).
	size int64
}

// entityID names an entity: its kind (entityAccount, …) and id.
type entityID struct {
	kind byte
	id   event.UUID
}

// entityPool keeps entities, with the arrays their batch built (the value
// written, the snapshots, the delta record, the events), from batch to
// batch: every batch builds them for thousands of entities.
var entityPool = sync.Pool{New: func() any { return new(entity) }}

// keepBytes is the largest array an entity keeps for the next batch (a
// busy entity's whole value is not kept for every small one).
const keepBytes = 4 << 10

// keepValBytes is the largest value array an entity keeps: room for a
// delta record, which most writes are. A whole value written again is
// copied to the cache (Store.keepFor), so an array that held one would
// only wait in the pool: at 1M events through the stream they would be
// 42 MB of its live heap.
const keepValBytes = 512

func getEntity(eid entityID) *entity {
	e := entityPool.Get().(*entity)
	*e = entity{eid: eid, ops: e.ops[:0], val: e.val[:0], snaps: e.snaps[:0], replays: e.replays[:0],
		arena: e.arena[:0], d: delta{ops: e.d.ops[:0]}}
	return e
}

// releaseEntities returns ents to entityPool at the end of their batch:
// nothing else holds them then (the cache keeps copies of their fields and
// their states, which they let go of here, as they do of the value read).
func releaseEntities(ents []*entity) {
	for _, e := range ents {
		clear(e.snaps[:cap(e.snaps)])
		val, arena, dops := e.val, e.arena, e.d.ops
		if cap(val) > keepValBytes {
			val = nil
		}
		if cap(arena) > keepBytes {
			arena = nil
		}
		if cap(dops) > keepBytes {
			dops = nil
		}
		*e = entity{ops: e.ops[:0], val: val[:0], snaps: e.snaps[:0], replays: e.replays[:0], arena: arena[:0], d: delta{ops: dops[:0]}}
		entityPool.Put(e)
	}
}

// snap is one event's snapshot on one entity.
type snap struct {
	idh uint64
	ev  int
	b   []byte
}

// counted is an event an entity had counted before: its index in the batch and
// when the entity forgets it (unix ms), which names its snapshot's string.
type counted struct {
	ev  int
	exp int64
}

// run is one Apply call's shared work.
type run struct {
	events   []*event.Envelope
	preps    []prep
	out      []*Values
	replayed []bool
	// reads holds, per event, the snapshot section of a counterparty only
	// read (paying in): it travels in the account's snapshot.
	reads [][]byte
	now   time.Time
	// memory: Memory's run, with no Redis to write (no replay memory, no
	// delta records, no snapshots: only the totals and the features).
	memory bool
}

// idHash is the replay memory's 8-byte hash of an event id (doc.go: the
// collision bound). The id's first 6 bytes are its time, the rest SHA-256
// bits: both halves are mixed.
func idHash(id event.UUID) uint64 {
	var lo, hi uint64
	for i := range 8 {
		hi = hi<<8 | uint64(id[i])
		lo = lo<<8 | uint64(id[8+i])
	}
	return mix64(lo ^ mix64(hi))
}

// mix64 is SplitMix64's finaliser: a bijection on uint64.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// grouping lists a batch's entities: entity returns the one named eid,
// added to the batch on the first event that touches it.
type grouping interface {
	entity(eid entityID) *entity
}

// batchGrouping is the Store's grouping: the batch's entities by id, in
// a map made for the batch (an entity's key string is built once, not per
// event), listed in ents.
type batchGrouping struct {
	byID map[entityID]*entity
	ents *[]*entity
}

func (g batchGrouping) entity(eid entityID) *entity {
	e := g.byID[eid]
	if e == nil {
		e = getEntity(eid)
		g.byID[eid] = e
		*g.ents = append(*g.ents, e)
	}
	return e
}

// batchArrays are the per-event arrays of a batch, kept by a caller that
// applies batch after batch (Memory) so that each batch does not allocate
// them again (the Values are about a kilobyte an event).
type batchArrays struct {
	preps    []prep
	vals     []Values
	out      []*Values
	replayed []bool
}

// take readies a's arrays for n events: every Values empty (its sections
// are zeroed as they are set), every event not replayed.
func (a *batchArrays) take(n int) {
	if cap(a.vals) < n {
		*a = batchArrays{preps: make([]prep, n), vals: make([]Values, n), out: make([]*Values, n), replayed: make([]bool, n)}
		return
	}
	a.preps, a.vals, a.out, a.replayed = a.preps[:n], a.vals[:n], a.out[:n], a.replayed[:n]
	for i := range a.vals {
		v := &a.vals[i]
		v.account, v.customer, v.cp = nil, nil, nil
	}
	clear(a.replayed)
}

// prepare reads what the batch needs of each event (its prep) into arrs
// and groups the events by entity: g's entities, each with its events in
// order; out are the events' Values to fill, reads says a counterparty is
// only read (paying in). It is Go alone, no Redis.
func prepare(events []*event.Envelope, g grouping, arrs *batchArrays) (out []*Values, reads bool, err error) {
	arrs.take(len(events))
	preps, vals := arrs.preps, arrs.vals
	out = arrs.out
	use := func(kind byte, id event.UUID, ev int, mode byte) {
		e := g.entity(entityID{kind, id})
		e.ops = append(e.ops, op{ev: ev, mode: mode})
	}
	for i, e := range events {
		out[i] = &vals[i]
		vals[i].txn = e.Kind == event.KindTransaction
		p := &preps[i]
		*p = prep{at: e.OccurredAt.Unix(), idh: idHash(e.ID)}
		switch e.Kind {
		case event.KindTransaction:
			p.in = e.Direction == event.DirectionIn
			var err error
			// An amount beyond ±10^11 is counted, left out of the sums.
			p.units, err = parseUnits(e.Amount)
			p.sum = err == nil
			p.acct = event.AccountID(e.WorkspaceID, e.AccountExternalID)
			use(entityAccount, p.acct, i, modeTxn)
			if e.CustomerExternalID != "" {
				use(entityCustomer, event.CustomerID(e.WorkspaceID, e.CustomerExternalID), i, modeTxn)
			}
			if e.Counterparty != nil && e.Counterparty.Fingerprint != "" {
				p.cp, p.hasCP = event.CounterpartyID(e.WorkspaceID, e.Counterparty.Fingerprint), true
				// A counterparty's events are the payments to it: money it
				// sends only reads its features.
				mode := byte(modeTxn)
				if p.in {
					mode = modeRead
				}
				use(entityCounterparty, p.cp, i, mode)
				if mode == modeRead {
					reads = true
				}
			}
		case event.KindAccountEvent:
			use(entityCustomer, event.CustomerID(e.WorkspaceID, e.CustomerExternalID), i, modeEvent)
		default:
			return nil, false, fmt.Errorf("features: event %d: unknown kind", i)
		}
	}
	return out, reads, nil
}
