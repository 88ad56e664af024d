package features

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

// casLua (a Cluster: one entity per call, keys of different slots cannot
// share one; writeLua is slower there) writes a value only if the key still
// holds the generation it was read with (at ARGV[7]: its last 8 bytes, -8,
// or in a value of an older format its first, 0: genAt), and in the
// same call appends the entity's replay snapshots (doc.go "Replays") to
// KEYS[2], its snapshot string of the events' expiry slot (same hash tag).
// ARGV: generation, value, TTL (s), "a" to append (the value is then a
// delta record and the new generation: delta.go) or "0", the snapshot
// records ("" for none), the unix ms at which a new snapshot string
// expires, the generation's offset.
const casLua = `local o = tonumber(ARGV[7])
if redis.call('GETRANGE', KEYS[1], o, o + 7) ~= ARGV[1] then
  return 0
end
if ARGV[4] == 'a' then
  redis.call('APPEND', KEYS[1], ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
end
if #ARGV[5] > 0 and redis.call('APPEND', KEYS[2], ARGV[5]) == #ARGV[5] then
  redis.call('PEXPIREAT', KEYS[2], ARGV[6])
end
return 1`

// createLua is casLua for a key that did not exist: SET NX instead of the
// generation compare. ARGV: value, TTL (s), the snapshot records, the
// snapshot string's expiry (unix ms).
const createLua = `if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  return 0
end
if #ARGV[3] > 0 and redis.call('APPEND', KEYS[2], ARGV[3]) == #ARGV[3] then
  redis.call('PEXPIREAT', KEYS[2], ARGV[4])
end
return 1`

// cas is loaded once per Redis node and called with EVALSHA; a node that
// answers NOSCRIPT gets the body (EVAL).
var cas, create = redis.NewScript(casLua), redis.NewScript(createLua)

// writeLua writes entities, each only if its key still holds the
// generation it was read with (genAt) or, for a key that did
// not exist, only if it still does not (SET NX), and in the same call, for
// each entity written, appends its replay snapshots (doc.go "Replays") to
// its snapshot string of their expiry slot: KEYS are pairs of an entity's
// key and that string (same hash tag). ARGV: TTL (s), then per entity: mode
// ("n" new key, "c" compare, "a" compare and append: the value is then a
// delta record, delta.go, "A" the same without refreshing the key's TTL,
// which this process did within keyTTLRefresh), generation read ("" for
// "n"), the offset GETRANGE reads it at ("-8" or, a value of an older
// format, "0": genAt), value (for "a" and "A" a delta record and the new
// generation, ONE APPEND), the snapshot records ("" for none), and the
// unix ms at which the snapshot string expires, set when this APPEND
// created it (the string's slot is fixed, so is its end).
// It returns one 1 (written) or 0 (lost to another writer) per entity.
// A single Redis writes up to perCall entities per call (one script call
// costs about as much as the commands it runs).
const writeLua = `local ttl = ARGV[1]
local res = {}
local a = 2
for k = 1, #KEYS, 2 do
  local key, mode = KEYS[k], ARGV[a]
  local ok
  if mode == 'n' then
    ok = redis.call('SET', key, ARGV[a + 3], 'NX', 'EX', ttl)
  else
    local o = tonumber(ARGV[a + 2])
    if redis.call('GETRANGE', key, o, o + 7) == ARGV[a + 1] then
      if mode == 'a' or mode == 'A' then
        ok = redis.call('APPEND', key, ARGV[a + 3])
        if mode == 'a' then
          redis.call('EXPIRE', key, ttl)
        end
      else
        ok = redis.call('SET', key, ARGV[a + 3], 'EX', ttl)
      end
    end
  end
  if ok then
    local snaps = ARGV[a + 4]
    if #snaps > 0 and redis.call('APPEND', KEYS[k + 1], snaps) == #snaps then
      redis.call('PEXPIREAT', KEYS[k + 1], ARGV[a + 5])
    end
    res[#res + 1] = 1
  else
    res[#res + 1] = 0
  end
  a = a + 6
end
return res`

// writeScript is loaded once per Redis node and called with EVALSHA; a node
// that answers NOSCRIPT gets the body (EVAL).
var writeScript = redis.NewScript(writeLua)

// perCall is how many entities one writeLua call writes on a single Redis
// (a Cluster refuses keys of different slots in one call: casLua and
// createLua, one entity each, are faster there).
// It bounds how long one call holds Redis (about 7 µs an entity).
const perCall = 100

// snapMargin is how much longer than the end of its slot a snapshot
// string lives: room for clocks of stream processes that disagree.
const snapMargin = time.Minute

// snapSlot is the span of expiry times whose snapshots share one string
// (doc.go "Replays"): fixed, not derived from the replay TTL, so a process
// with another TTL finds the snapshots another wrote.
const snapSlot = 5 * time.Minute

// Defaults of Options.
const (
	DefaultKeyPrefix = "sp:"
	DefaultReplayTTL = 30 * time.Minute
	// DefaultCacheBytes is Options.CacheBytes' default: values, and the
	// decoded states of large entities, as estimated (cache.go). Measured
	// at 1M events (BenchmarkStreamThroughput): 94 % of the
	// entities a batch touches come from it at 128 MiB, 81 % at 80 MiB,
	// 71 % at 64 MiB and 54 % at 48 MiB; every point less costs a read and
	// a decode.
	DefaultCacheBytes = 128 << 20
)

// keyTTLRefresh: an append by a process that set the key's TTL less than
// this long ago leaves it as it is (one EXPIRE less per entity and batch
// on a single Redis; the key exists, with its TTL, since the CAS matched):
// an entity is then forgotten after 31 days of silence less up to an
// hour, still beyond the longest window.
const keyTTLRefresh = time.Hour

// keyTTL is every key's TTL, from the wall clock, refreshed on write: the
// longest window (30 d) plus a day, so an entity silent for that long is
// forgotten.
const keyTTL = 31 * 24 * time.Hour

// maxAttempts bounds the read-compute-CAS rounds of one batch when other
// writers keep changing the same entities.
const maxAttempts = 12

// Options configure a Store.
type Options struct {
	// KeyPrefix starts every key; default "sp:".
	KeyPrefix string
	// ReplayTTL is how long an event id is remembered as counted
	// (SP_STREAM_REPLAY_TTL); default 30 minutes.
	ReplayTTL time.Duration
	// CacheBytes bounds the entities kept in memory between batches, as
	// estimated (doc.go "Apply": an entity this process wrote last is not
	// read again; cache.go: a small one is kept as its value, a large one
	// decoded); 0 is DefaultCacheBytes, negative turns the cache off.
	CacheBytes int64
}

// Store keeps the running totals of the stream's features in Redis.
type Store struct {
	client redis.UniversalClient
	prefix string
	ttl    time.Duration
	now    func() time.Time
	// snapMargin is how much longer than its slot's end a snapshot
	// string lives, snapSlot the span of one string's expiries (tests
	// shorten both).
	snapMargin, snapSlot time.Duration
	// wholeValues (tests) writes every value whole, never a delta record.
	wholeValues bool
	// serial (tests) computes a batch's entities one after the other.
	serial bool
	// beforeWrite, when set (tests), runs between computing a batch and
	// writing it: another writer can be made to step in.
	beforeWrite func(attempt int)
	// conflicts counts entity writes lost to another writer (and redone).
	conflicts atomic.Int64
	// restored and missing count replayed entity sections given their
	// first application's features from a snapshot, and those without one.
	restored, missing atomic.Int64
	// cache holds entity states between batches (cache.go); hits and
	// reads count the entities taken from it and those read from Redis.
	cache       *cache
	hits, reads atomic.Int64
}

// CacheStats reports how many entities batches took from the cache (not
// read from Redis) and how many they read.
func (s *Store) CacheStats() (hits, reads int64) {
	return s.hits.Load(), s.reads.Load()
}

// Conflicts reports how many entity writes were lost to another writer
// (another stream process, or another batch of this one that wrote the
// entity first) and redone.
func (s *Store) Conflicts() int64 { return s.conflicts.Load() }

// Snapshots reports how many replayed entity sections got their first
// application's features back from a snapshot (restored) and how many had
// none (missing: written by an older version or evicted; those got the
// features as they are now).
func (s *Store) Snapshots() (restored, missing int64) {
	return s.restored.Load(), s.missing.Load()
}

// New returns a Store on client. It does no I/O.
func New(client redis.UniversalClient, o Options) *Store {
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if o.ReplayTTL <= 0 {
		o.ReplayTTL = DefaultReplayTTL
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	return &Store{client: client, prefix: o.KeyPrefix, ttl: o.ReplayTTL, now: time.Now, snapMargin: snapMargin, snapSlot: snapSlot,
		cache: newCache(o.CacheBytes)}
}

// Entity letters of the keys' hash tags.
const (
	entityAccount      = 'a'
	entityCustomer     = 'c'
	entityCounterparty = 'p'
)

func kindName(k byte) string {
	switch k {
	case entityAccount:
		return "account"
	case entityCustomer:
		return "customer"
	}
	return "counterparty"
}

// key is an entity's one key: <prefix>{<e>:<uuid>}; the braces are the
// Cluster hash tag.
func (s *Store) key(entity byte, id event.UUID) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + 41)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.WriteByte(entity)
	b.WriteByte(':')
	b.WriteString(id.String())
	b.WriteByte('}')
	return b.String()
}

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
	// CAS checks it is still current.
	hit bool
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
}

// section is the features' key of an entity kind.
func section(k byte) string {
	switch k {
	case entityAccount:
		return "account"
	case entityCustomer:
		return "customer"
	}
	return "counterparty"
}

// Apply applies each event (transaction or account event) idempotently and
// returns, per event, its features as of right after it: the map of doc.go,
// ready for Bloblang (int64, bool, json.Number, map[string]any, nil); for
// an event applied before, inside the replay TTL, the features of its first
// application (doc.go "Replays"). Two round trips per batch without
// conflict, three when it holds replays from earlier batches (doc.go
// "Apply"), each one pipeline that go-redis splits per node on a Cluster.
//
// An entity whose value does not decode is counted from empty (doc.go
// "Unreadable values"): Apply then returns the features of every event AND
// a *CorruptError.
func (s *Store) Apply(ctx context.Context, events []*event.Envelope) ([]map[string]any, error) {
	out, _, err := s.ApplyReplays(ctx, events)
	return out, err
}

// ApplyReplays is Apply that also reports, per event, whether it was a
// replay: its primary entity (the account of a transaction, the customer of
// an account event) remembered it as counted, so nothing changed; its
// features are those its first application returned (doc.go "Replays";
// as they are now where no snapshot is left). The stream uses it to leave
// an event it has fully evaluated before alone.
func (s *Store) ApplyReplays(ctx context.Context, events []*event.Envelope) ([]map[string]any, []bool, error) {
	vals, replayed, err := s.ApplyValues(ctx, events)
	if vals == nil {
		return nil, nil, err
	}
	out := make([]map[string]any, len(vals))
	for i, v := range vals {
		out[i] = v.Map()
	}
	return out, replayed, err
}

// ApplyValues is ApplyReplays with each event's features as Values, built
// into maps only as far as the caller asks (rule_eval: the features its
// rules name).
func (s *Store) ApplyValues(ctx context.Context, events []*event.Envelope) ([]*Values, []bool, error) {
	preps := make([]prep, len(events))
	reads := false // a counterparty is only read (computeAll)
	// By kind and id: an entity's key string is built once, not per event.
	byID := make(map[entityID]*entity, len(events)*2)
	var ents []*entity
	// Every return below is the end of the batch's entities.
	defer func() { releaseEntities(ents) }()
	use := func(kind byte, id event.UUID, ev int, mode byte) {
		e := byID[entityID{kind, id}]
		if e == nil {
			e = getEntity(entityID{kind, id})
			byID[entityID{kind, id}] = e
			ents = append(ents, e)
		}
		e.ops = append(e.ops, op{ev: ev, mode: mode})
	}
	out := make([]*Values, len(events))
	vals := make([]Values, len(events))
	for i, e := range events {
		out[i] = &vals[i]
		vals[i].txn = e.Kind == event.KindTransaction
		p := &preps[i]
		p.at = e.OccurredAt.Unix()
		p.idh = idHash(e.ID)
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
			return nil, nil, fmt.Errorf("features: event %d: unknown kind", i)
		}
	}
	replayed := make([]bool, len(events))
	if len(ents) == 0 {
		return out, replayed, nil
	}
	r := &run{events: events, preps: preps, out: out, replayed: replayed}
	if reads {
		r.reads = make([][]byte, len(events))
	}
	// Entities this process wrote last come from the cache (cache.go);
	// the write's CAS proves them current (or they are read again, as
	// below). Those only read are read: nothing would check a cached state
	// of theirs.
	pending := ents
	for attempt := 1; ; attempt++ {
		s.cache.take(pending, attempt == 1)
		for _, e := range pending {
			if e.key == "" { // not in the cache
				e.key = s.key(e.eid.kind, e.eid.id)
			}
		}
		if err := s.load(ctx, pending); err != nil {
			s.cache.abort(pending)
			return nil, nil, err
		}
		r.now = s.now()
		s.computeAll(pending, r)
		// An entity whose cached value did not decode is let go of here
		// and read from Redis in the next round, like a lost write.
		var reread []*entity
		for _, e := range pending {
			if e.reread {
				reread = append(reread, e)
			}
		}
		if len(reread) > 0 {
			s.cache.abort(reread)
			// A copy: pending may be ents, which stays whole.
			pending = slices.DeleteFunc(slices.Clone(pending), func(e *entity) bool { return e.reread })
		}
		// A counterparty paying in is only read: its section goes into the
		// account's snapshot (computed in any order above).
		if r.reads != nil {
			for _, e := range pending {
				if e.eid.kind != entityAccount {
					continue
				}
				for k := range e.snaps {
					if rd := r.reads[e.snaps[k].ev]; rd != nil {
						b := append(e.snaps[k].b, rd...)
						b[0] |= secReadCP
						e.snaps[k].b = b
					}
				}
			}
		}
		// The new states go to the cache now, for the next batch to
		// compute on while this one is written; the writes go to Redis in
		// the order of their batches (cache.go).
		turn := s.cache.publish(pending)
		if s.beforeWrite != nil {
			s.beforeWrite(attempt)
		}
		s.cache.waitTurn(turn)
		lost, err := s.write(ctx, pending)
		s.cache.done(turn)
		if err != nil {
			s.cache.invalidate(pending)
			return nil, nil, err
		}
		if len(lost) == 0 && len(reread) == 0 {
			break
		}
		s.cache.invalidate(lost)
		s.conflicts.Add(int64(len(lost)))
		if attempt == maxAttempts {
			return nil, nil, fmt.Errorf("features: %d of %d entities still changed by another writer after %d attempts", len(lost), len(ents), attempt)
		}
		for _, e := range reread {
			e.reread = false
		}
		lost = append(lost, reread...)
		for _, e := range lost {
			e.hit = false
		}
		pending = lost
		// Another writer changed them between our read and write: read them
		// again, after a short random pause so two writers fall out of step.
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("features: %w", ctx.Err())
		case <-time.After(time.Duration(rand.Int64N(int64(attempt) * int64(time.Millisecond)))):
		}
	}
	if err := s.restore(ctx, ents, r); err != nil {
		return nil, nil, err
	}
	var ce *CorruptError
	for _, e := range ents {
		if e.corrupt != nil {
			if ce == nil {
				ce = &CorruptError{Entities: map[string]int{}, Err: e.corrupt}
			}
			ce.Entities[kindName(e.eid.kind)]++
		}
	}
	if ce != nil {
		return out, replayed, ce
	}
	return out, replayed, nil
}

// CorruptError reports entities whose Redis value did not decode (another
// format version, or damaged): each was counted from empty with the batch's
// events and overwritten, and every event's features were returned.
type CorruptError struct {
	Entities map[string]int // kind ("account", "customer", "counterparty") → how many
	Err      error          // the first one's decode error
}

func (e *CorruptError) Error() string {
	kinds := make([]string, 0, len(e.Entities))
	for k, n := range e.Entities {
		kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("features: unreadable running totals of %s, reset and counted from this batch: %v",
		strings.Join(kinds, ", "), e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// load reads the values of ents in one pipeline.
func (s *Store) load(ctx context.Context, ents []*entity) error {
	cmds := make([]*redis.StringCmd, len(ents))
	reads := 0
	for _, e := range ents {
		if !e.hit {
			reads++
		}
	}
	s.hits.Add(int64(len(ents) - reads))
	s.reads.Add(int64(reads))
	if reads == 0 {
		return nil
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range ents {
			if !e.hit {
				cmds[i] = p.Get(ctx, e.key)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("features: redis: reading %d entities: %w", len(ents), err)
	}
	for i, e := range ents {
		if e.hit {
			continue
		}
		v, err := cmds[i].Result()
		switch {
		case errors.Is(err, redis.Nil):
			e.base, e.exists, e.gen, e.goff, e.v3, e.vlen = "", false, "", 0, false, 0
		case err != nil:
			return fmt.Errorf("features: redis: reading a %s: %w", kindName(e.eid.kind), err)
		default:
			e.base, e.exists, e.vlen = v, true, len(v)
			e.gen, e.goff = genAt(v)
			e.v3 = e.goff != 0
		}
	}
	return nil
}

// minPerWorker is the fewest entities worth a goroutine of computeAll.
const minPerWorker = 256

// computeAll computes ents, on up to GOMAXPROCS goroutines: an entity's
// computation touches only its own state and its own section of each
// event's Values (and, for a counterparty only read, its event's slot of
// r.reads), and while a batch computes, the next batch waits for the
// entities it holds (cache.go), so the computing is on the critical path.
func (s *Store) computeAll(ents []*entity, r *run) {
	w := min(runtime.GOMAXPROCS(0), len(ents)/minPerWorker)
	if w <= 1 || s.serial {
		for _, e := range ents {
			s.compute(e, r)
		}
		return
	}
	var wg sync.WaitGroup
	for g := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(ents); i += w {
				s.compute(ents[i], r)
			}
		}()
	}
	wg.Wait()
}

// compute applies e's events to its state (the cache's, computed on in
// place, or decoded as read) and records their features and, for each
// event counted, its snapshot.
func (s *Store) compute(e *entity, r *run) {
	if !e.hit || e.st == nil {
		// Read from Redis, or the cache's value of it (cache.go).
		v := e.base
		if e.hit {
			v = unsafe.String(unsafe.SliceData(e.cval), len(e.cval))
		}
		e.corrupt, e.st = nil, nil
		if e.exists {
			st, base, err := decodeBase(v)
			switch {
			case err != nil && e.hit:
				// The cache holds what this process encoded, so this is
				// never expected; but Redis may hold the entity intact.
				e.reread, e.cval, e.changed = true, nil, false
				e.snaps, e.replays = e.snaps[:0], e.replays[:0]
				return
			case err != nil:
				e.corrupt = err
			case e.hit:
				// The cache's value may be encoded whole where Redis' has
				// records (keepFor): e.blen stays Redis' base.
				e.st = st
			default:
				e.st, e.blen = st, base
			}
		}
		if e.st == nil {
			e.st = newState()
		}
	}
	st := e.st
	nowMs, ttlMs := r.now.UnixMilli(), s.ttl.Milliseconds()
	e.changed = e.corrupt != nil
	e.snaps, e.replays, e.arena = e.snaps[:0], e.replays[:0], e.arena[:0]
	e.d.reset()
	keep := func(ev int, idh uint64, start int) {
		e.snaps = append(e.snaps, snap{idh: idh, ev: ev, b: e.arena[start:len(e.arena):len(e.arena)]})
	}
	for _, o := range e.ops {
		ev, p := r.events[o.ev], &r.preps[o.ev]
		switch o.mode {
		case modeRead:
			sv := r.out[o.ev].setSec(slotCP, secCP)
			sv.tf.w = st.windows(ev.Currency)
			r.reads[o.ev] = appendCPSnap(r.reads[o.ev][:0], &sv.tf.w)
		case modeEvent:
			exp, seen := st.replay(p.idh, nowMs, ttlMs)
			if !seen {
				st.applyEvent(p.at, ev.Type)
				e.d.event(p.idh, p.at, ev.Type)
				e.changed = true
			}
			r.replayed[o.ev] = seen
			sv := r.out[o.ev].setSec(slotCustomer, secEvents)
			st.evFeat(&sv.ef, p.at)
			if seen {
				e.replays = append(e.replays, counted{o.ev, exp})
			} else {
				start := len(e.arena)
				e.arena = appendEvSnap(append(e.arena, secEvents), &sv.ef)
				keep(o.ev, p.idh, start)
			}
		case modeTxn:
			exp, seen := st.replay(p.idh, nowMs, ttlMs)
			newcp, ssp := false, int64(-1)
			if !seen {
				var member *event.UUID
				switch {
				case e.eid.kind == entityCounterparty:
					member = &p.acct
				case p.hasCP:
					member = &p.cp
				}
				newcp, ssp = st.applyTxn(p.at, p.in, ev.Currency, p.units, p.sum, member)
				e.d.txn(p.idh, p.at, p.in, ev.Currency, p.units, p.sum, member)
				e.changed = true
			}
			start := len(e.arena)
			switch e.eid.kind {
			case entityAccount:
				r.replayed[o.ev] = seen
				sv := r.out[o.ev].setSec(slotAccount, secTxn)
				st.txnFeat(&sv.tf, ev.Currency, newcp, ssp)
				if !seen {
					e.arena = appendTxnSnap(append(e.arena, secTxn), &sv.tf)
				}
			case entityCustomer:
				sv := r.out[o.ev].setSec(slotCustomer, secTxn|secEvents)
				st.txnFeat(&sv.tf, ev.Currency, newcp, ssp)
				st.evFeat(&sv.ef, p.at)
				if !seen {
					e.arena = appendEvSnap(appendTxnSnap(append(e.arena, secTxn|secEvents), &sv.tf), &sv.ef)
				}
			case entityCounterparty:
				sv := r.out[o.ev].setSec(slotCP, secCP)
				sv.tf.w = st.windows(ev.Currency)
				if !seen {
					e.arena = appendCPSnap(append(e.arena, secCP), &sv.tf.w)
				}
			}
			if seen {
				e.replays = append(e.replays, counted{o.ev, exp})
			} else {
				keep(o.ev, p.idh, start)
			}
		}
	}
	if e.changed {
		st.prune(nowMs)
		if len(e.snaps) > 0 {
			// Every event counted now is remembered until nowMs + ttlMs:
			// its snapshot goes to that slot's string.
			e.skey, e.skeyAt = s.snapKeyOf(e, nowMs+ttlMs)
		}
		// Every write takes a random generation, never the one read plus
		// one: two writers that read the same value (a batch of this
		// process that read it while another held it, or another process)
		// would both write "+1", and a batch that computed on the loser's
		// published value (cache.go) would then pass its CAS against the
		// winner's. Likewise a key that expired and was created again.
		gen := rand.Uint64()
		// Append this batch's record while the records stay at most half
		// the base (delta.go); else write the whole value again.
		e.appended = false
		if e.exists && e.v3 && e.corrupt == nil && e.blen > 0 && !s.wholeValues {
			e.val = e.d.appendRecord(e.val[:0], nowMs, ttlMs)
			e.val = binary.BigEndian.AppendUint64(e.val, gen)
			if e.vlen-e.blen+len(e.val) <= e.blen/2 {
				e.appended = true
			}
		}
		if !e.appended {
			if cap(e.val) < e.vlen {
				// About the size it will be: growing from nothing copied it
				// several times over.
				e.val = make([]byte, 0, e.vlen+len(e.d.ops)+64)
			}
			e.val = encode(e.val[:0], gen, st)
		}
		e.refreshTTL = !e.appended || !e.hit || nowMs-e.ttlAt >= keyTTLRefresh.Milliseconds()
		if e.refreshTTL {
			e.ttlAt = nowMs
		}
	}
	if s.cache.max >= 0 && e.corrupt == nil {
		s.keepFor(e)
	}
	e.base = ""
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

// restore gives every replayed event, on each entity that had counted it,
// the features its first application returned: from this batch's own
// snapshots when it was first applied in this batch, else from the
// entity's snapshot string of the event's expiry slot, all in ONE more
// pipelined round trip (GET per entity and slot). A missing snapshot
// leaves the features as they are now.
func (s *Store) restore(ctx context.Context, ents []*entity, r *run) error {
	type fetch struct {
		e   *entity
		key string
		evs []int
		cmd *redis.StringCmd
	}
	var fetches []fetch
	for _, e := range ents {
		first := len(fetches)
	next:
		for _, rp := range e.replays {
			idh := r.preps[rp.ev].idh
			for k := range e.snaps {
				if e.snaps[k].idh == idh {
					s.put(e, rp.ev, string(e.snaps[k].b), r)
					continue next
				}
			}
			key, _ := s.snapKey(e.key, rp.exp)
			for i := first; i < len(fetches); i++ {
				if fetches[i].key == key {
					fetches[i].evs = append(fetches[i].evs, rp.ev)
					continue next
				}
			}
			fetches = append(fetches, fetch{e: e, key: key, evs: []int{rp.ev}})
		}
	}
	if len(fetches) == 0 {
		return nil
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range fetches {
			fetches[i].cmd = p.Get(ctx, fetches[i].key)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("features: redis: reading the snapshots of %d replayed entities: %w", len(fetches), err)
	}
	for _, f := range fetches {
		v, err := f.cmd.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("features: redis: reading the snapshots of a %s: %w", kindName(f.e.eid.kind), err)
		}
		for _, ev := range f.evs {
			sn, ok := findSnap(v, r.preps[ev].idh)
			if !ok {
				s.missing.Add(1)
				continue
			}
			s.put(f.e, ev, sn, r)
		}
	}
	return nil
}

// appendSnaps appends e's snapshots as the records of its snapshot
// string: per event the id's 8-byte hash, the snapshot's length (uvarint)
// and the snapshot.
func appendSnaps(b []byte, snaps []snap) []byte {
	for _, sn := range snaps {
		b = binary.LittleEndian.AppendUint64(b, sn.idh)
		b = binary.AppendUvarint(b, uint64(len(sn.b)))
		b = append(b, sn.b...)
	}
	return b
}

// findSnap returns the snapshot of the event whose id hashes to idh in a
// snapshot string: its last record, as a state reset (an unreadable value)
// or an event counted again after its memory expired writes a newer one.
func findSnap(v string, idh uint64) (string, bool) {
	var found string
	ok := false
	for len(v) >= 9 {
		h := binary.LittleEndian.Uint64([]byte(v[:8]))
		n, w := uvarintString(v[8:])
		if w <= 0 || uint64(len(v)-8-w) < n {
			break // damaged: what follows cannot be framed
		}
		if h == idh {
			found, ok = v[8+w:8+w+int(n)], true
		}
		v = v[8+w+int(n):]
	}
	return found, ok
}

// uvarintString is binary.Uvarint on a string.
func uvarintString(s string) (uint64, int) {
	var x uint64
	var sh uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			return x | uint64(c)<<sh, i + 1
		}
		x |= uint64(c&0x7f) << sh
		sh += 7
	}
	return 0, 0
}

// put replaces event ev's section of e with its snapshot v.
func (s *Store) put(e *entity, ev int, v string, r *run) {
	sec, err := decodeSnap(v)
	if err != nil || sec.own == nil {
		s.missing.Add(1)
		return
	}
	s.restored.Add(1)
	switch v := r.out[ev]; e.eid.kind {
	case entityAccount:
		v.account = sec.own
	case entityCustomer:
		v.customer = sec.own
	default:
		v.cp = sec.own
	}
	if sec.readCP != nil {
		r.out[ev].cp = sec.readCP
	}
}

// snapKey is the snapshot string of the entity whose key is key for the
// events it remembers until exp (unix ms): <key>:r:<slot>, slot = exp /
// snapSlot, the same hash tag, so the CAS script writes both; and when
// that string expires (unix ms): its slot's end and snapMargin, after
// every event in it is forgotten.
func (s *Store) snapKey(key string, exp int64) (string, int64) {
	n, until := s.snapSlotOf(exp)
	return snapKeyIn(key, n), until
}

// snapSlotOf is the slot of the snapshots of events remembered until exp,
// and when its string expires (snapKey).
func (s *Store) snapSlotOf(exp int64) (n, until int64) {
	w := s.snapSlot.Milliseconds()
	n = exp / w
	return n, (n+1)*w + s.snapMargin.Milliseconds()
}

func snapKeyIn(key string, slot int64) string {
	return key + snapSuffix + strconv.FormatInt(slot, 10)
}

const snapSuffix = ":r:"

// snapKeyOf is snapKey for e, the string built once per slot for as long
// as e's cache entry lives: only the batch holding the entry uses it.
func (s *Store) snapKeyOf(e *entity, exp int64) (string, int64) {
	x := e.cx
	if x == nil {
		return s.snapKey(e.key, exp)
	}
	n, until := s.snapSlotOf(exp)
	if x.skey == "" || x.skeyN != n {
		x.skey, x.skeyN = snapKeyIn(e.key, n), n
	}
	return x.skey, until
}

// scriptArg is a script argument go-redis sends as its bytes
// (encoding.BinaryMarshaler). Arguments go as pointers (*scriptArg,
// *string, *int64), which an interface holds without an allocation: boxing
// every field and snapshot would be a third of what write allocates.
type scriptArg []byte

func (a *scriptArg) MarshalBinary() ([]byte, error) { return *a, nil }

// writeCall is one writeLua call of write: its entities, its arguments
// (EVALSHA, its hash, the number of keys, keys, ARGV) and its command.
type writeCall struct {
	ents []*entity
	args []any
	cmd  *redis.Cmd
}

// writeBufs are write's arrays, kept from batch to batch (writePool): the
// arguments of every call point into them, and allocating them afresh each
// batch would be about 6 % of the bytes a batch allocates (406 B an entity
// written; BenchmarkApplyLoadgen 6,425 B an event against 6,030 with them
// kept).
type writeBufs struct {
	changed []*entity
	calls   []writeCall
	args    []any
	strs    []string
	ints    []int64
	raws    []scriptArg
	blob    []byte
}

var writePool = sync.Pool{New: func() any { return new(writeBufs) }}

// release clears what points into the batch (entities, values, keys: they
// must not stay alive in the pool) and returns w to writePool.
func (w *writeBufs) release() {
	clear(w.changed)
	clear(w.calls)
	clear(w.args)
	clear(w.strs)
	clear(w.raws)
	if cap(w.blob) > 1<<20 {
		w.blob = nil // one batch's many snapshots: not kept for every batch
	}
	w.changed, w.calls, w.args, w.strs, w.ints, w.raws, w.blob = w.changed[:0], w.calls[:0], w.args[:0], w.strs[:0], w.ints[:0], w.raws[:0], w.blob[:0]
	writePool.Put(w)
}

// reuse returns b emptied, with room for n (a new array when it has not).
func reuse[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, 0, n)
	}
	return b[:0]
}

// write stores every changed entity and its snapshots in one pipeline of
// script calls, each entity only if nobody wrote it since it was read, and
// returns those somebody did.
func (s *Store) write(ctx context.Context, ents []*entity) ([]*entity, error) {
	if _, ok := s.client.(*redis.Client); !ok {
		return s.writeEach(ctx, ents)
	}
	wb := writePool.Get().(*writeBufs)
	defer wb.release()
	changed := wb.changed[:0]
	nSnaps := 0
	for _, e := range ents {
		if e.changed {
			changed = append(changed, e)
			for _, sn := range e.snaps {
				nSnaps += 8 + binary.MaxVarintLen64 + len(sn.b)
			}
		}
	}
	wb.changed = changed
	if len(changed) == 0 {
		return nil, nil
	}
	ttlArg := int64(keyTTL / time.Second)
	sha := writeScript.Hash()
	nCalls := (len(changed) + perCall - 1) / perCall
	// Sized for the whole batch before the first argument points into
	// them: an array that grew would move under the arguments.
	nArgs := 4*nCalls + 8*len(changed)
	calls := reuse(wb.calls, nCalls)
	args := reuse(wb.args, nArgs)
	strs := reuse(wb.strs, len(changed))
	ints := reuse(wb.ints, 2*nCalls+len(changed))
	raws := reuse(wb.raws, 2*len(changed))
	blob := reuse(wb.blob, nSnaps)
	// Kept (and cleared) by release whatever happens below.
	wb.calls, wb.args, wb.strs, wb.ints, wb.raws, wb.blob = calls, args, strs, ints, raws, blob
	capStrs, capInts, capRaws, capBlob := cap(strs), cap(ints), cap(raws), cap(blob)
	str := func(v string) *string { strs = append(strs, v); return &strs[len(strs)-1] }
	num := func(v int64) *int64 { ints = append(ints, v); return &ints[len(ints)-1] }
	raw := func(v []byte) *scriptArg { raws = append(raws, v); return &raws[len(raws)-1] }
	for len(changed) > 0 {
		c := writeCall{ents: changed[:min(perCall, len(changed))]}
		changed = changed[len(c.ents):]
		start := len(args)
		args = append(args, "evalsha", sha, num(int64(2*len(c.ents))))
		for _, e := range c.ents {
			if len(e.snaps) == 0 {
				// Untouched, but a key of the entity's slot all the same.
				args = append(args, &e.key, &e.key)
			} else {
				args = append(args, &e.key, &e.skey)
			}
		}
		args = append(args, num(ttlArg))
		for _, e := range c.ents {
			mode, gen, off := "n", "", "0"
			if e.exists {
				mode, gen = "c", e.gen
				if e.goff != 0 {
					off = "-8"
				}
				if e.appended && e.corrupt == nil {
					mode = "a"
					if !e.refreshTTL {
						mode = "A"
					}
				}
			}
			start := len(blob)
			blob = appendSnaps(blob, e.snaps)
			args = append(args, mode, str(gen), off, raw(e.val), raw(blob[start:len(blob):len(blob)]), num(e.skeyAt))
		}
		c.args = args[start:len(args):len(args)]
		calls = append(calls, c)
	}
	wb.calls, wb.args, wb.strs, wb.ints, wb.raws, wb.blob = calls, args, strs, ints, raws, blob
	if len(args) > nArgs || len(strs) > capStrs || len(ints) > capInts || len(raws) > capRaws || len(blob) > capBlob {
		// An array outgrown moved: earlier arguments would point into the old one.
		return nil, fmt.Errorf("features: writing %d entities: script arguments miscounted", len(wb.changed))
	}
	pipe := s.client.Pipeline()
	for i := range calls {
		calls[i].cmd = pipe.Do(ctx, calls[i].args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// A node that lost its scripts (restart, SCRIPT FLUSH, failover)
		// answers NOSCRIPT without running anything: send exactly those
		// again with the body.
		var again []int
		for i := range calls {
			cerr := calls[i].cmd.Err()
			if cerr == nil || errors.Is(cerr, redis.Nil) {
				continue
			}
			if !redis.HasErrorPrefix(cerr, "NOSCRIPT") {
				return nil, fmt.Errorf("features: redis: writing %d entities: %w", len(calls[i].ents), cerr)
			}
			again = append(again, i)
		}
		if len(again) > 0 {
			pipe = s.client.Pipeline()
			for _, i := range again {
				args := append([]any{"eval", writeLua}, calls[i].args[2:]...)
				calls[i].cmd = pipe.Do(ctx, args...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return nil, fmt.Errorf("features: redis (script reload): %w", err)
			}
		}
	}
	var lost []*entity
	for i := range calls {
		c := &calls[i]
		res, err := c.cmd.Int64Slice()
		if err == nil && len(res) != len(c.ents) {
			err = fmt.Errorf("%d results for %d entities", len(res), len(c.ents))
		}
		if err != nil {
			return nil, fmt.Errorf("features: redis: writing %d entities: %w", len(c.ents), err)
		}
		for j, n := range res {
			if n != 1 {
				lost = append(lost, c.ents[j])
			}
		}
	}
	return lost, nil
}

// writeEach (a Cluster) stores every changed entity and its snapshots in one pipeline of
// CAS script calls, each only if nobody wrote the entity since it was read,
// and returns those somebody did.
func (s *Store) writeEach(ctx context.Context, ents []*entity) ([]*entity, error) {
	type w struct {
		e    *entity
		sc   *redis.Script
		keys []string
		args []any
		cas  *redis.Cmd
	}
	ws := make([]w, 0, len(ents))
	ttlArg := int64(keyTTL / time.Second)
	pipe := s.client.Pipeline()
	for _, e := range ents {
		if !e.changed {
			continue
		}
		skey := e.skey
		if len(e.snaps) == 0 {
			skey = e.key // untouched, but a key of the entity's slot all the same
		}
		snaps := appendSnaps(nil, e.snaps)
		x := w{e: e, sc: cas, keys: []string{e.key, skey}}
		if e.exists {
			mode := "0"
			if e.appended && e.corrupt == nil {
				mode = "a"
			}
			x.args = []any{e.gen, e.val, ttlArg, mode, snaps, e.skeyAt, e.goff}
		} else {
			x.sc = create
			x.args = []any{e.val, ttlArg, snaps, e.skeyAt}
		}
		x.cas = x.sc.EvalSha(ctx, pipe, x.keys, x.args...)
		ws = append(ws, x)
	}
	if len(ws) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// A node that lost its scripts (restart, SCRIPT FLUSH, failover)
		// answers NOSCRIPT without running anything: send exactly those
		// again with the body.
		var again []int
		for i, x := range ws {
			cerr := x.cas.Err()
			if cerr == nil || errors.Is(cerr, redis.Nil) {
				continue
			}
			if !redis.HasErrorPrefix(cerr, "NOSCRIPT") {
				return nil, fmt.Errorf("features: redis: writing a %s: %w", kindName(x.e.eid.kind), cerr)
			}
			again = append(again, i)
		}
		if len(again) > 0 {
			pipe = s.client.Pipeline()
			for _, i := range again {
				ws[i].cas = ws[i].sc.Eval(ctx, pipe, ws[i].keys, ws[i].args...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return nil, fmt.Errorf("features: redis (script reload): %w", err)
			}
		}
	}
	var lost []*entity
	for _, x := range ws {
		n, err := x.cas.Int64()
		if err != nil {
			return nil, fmt.Errorf("features: redis: writing a %s: %w", kindName(x.e.eid.kind), err)
		}
		if n != 1 {
			lost = append(lost, x.e)
		}
	}
	return lost, nil
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

// read returns one entity's state (empty when it has no key).
func (s *Store) read(ctx context.Context, entity byte, id event.UUID) (*state, error) {
	v, err := s.client.Get(ctx, s.key(entity, id)).Result()
	if errors.Is(err, redis.Nil) {
		return newState(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("features: redis: reading a %s: %w", kindName(entity), err)
	}
	st, err := decode(v)
	if err != nil {
		return nil, fmt.Errorf("features: reading a %s: %w", kindName(entity), err)
	}
	return st, nil
}

// ReadAccount returns an account's features as of its own head (sums in
// currency) without changing anything; new_counterparty is false and
// seconds_since_previous -1, as for a replay.
func (s *Store) ReadAccount(ctx context.Context, workspace event.UUID, accountExternalID, currency string) (map[string]any, error) {
	st, err := s.read(ctx, entityAccount, event.AccountID(workspace, accountExternalID))
	if err != nil {
		return nil, err
	}
	m := make(map[string]any, 22)
	st.putTransaction(m, currency, false, -1)
	return m, nil
}

// ReadCustomer is ReadAccount for a customer: the transaction features and
// the account event ones (seconds measured to the head's latest event).
func (s *Store) ReadCustomer(ctx context.Context, workspace event.UUID, customerExternalID, currency string) (map[string]any, error) {
	st, err := s.read(ctx, entityCustomer, event.CustomerID(workspace, customerExternalID))
	if err != nil {
		return nil, err
	}
	m := make(map[string]any, 27)
	st.putTransaction(m, currency, false, -1)
	st.putEvents(m, max(st.mx, 0))
	return m, nil
}

// ReadCounterparty is ReadAccount for a counterparty, named by its
// de-duplication fingerprint.
func (s *Store) ReadCounterparty(ctx context.Context, workspace event.UUID, fingerprint, currency string) (map[string]any, error) {
	st, err := s.read(ctx, entityCounterparty, event.CounterpartyID(workspace, fingerprint))
	if err != nil {
		return nil, err
	}
	m := make(map[string]any, 6)
	st.putCounterparty(m, currency)
	return m, nil
}
