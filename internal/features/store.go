package features

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

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
	out, replayed, _, err := s.applyValues(ctx, events, nil)
	return out, replayed, err
}

// ApplyValuesUnless is ApplyValues for events that each come with a key
// (unless[i]) read in the same pipeline as the entities (round trip 1): an
// event whose key holds a value is not applied; held[i] is that value, and
// its Values nil. The decision API's remembered answers: a repeat is
// answered as before, and the batch's reads cost one round trip, not two.
// When one is held the others are applied in a batch of their own (the
// reads of the first are dropped: a repeat is rare).
func (s *Store) ApplyValuesUnless(ctx context.Context, events []*event.Envelope, unless []string) ([]*Values, [][]byte, error) {
	if len(unless) != len(events) {
		return nil, nil, fmt.Errorf("features: %d keys for %d events", len(unless), len(events))
	}
	out, _, held, err := s.applyValues(ctx, events, unless)
	if err != nil || held == nil {
		return out, nil, err
	}
	rest := make([]*event.Envelope, 0, len(events))
	for i, e := range events {
		if held[i] == nil {
			rest = append(rest, e)
		}
	}
	out = make([]*Values, len(events))
	if len(rest) == 0 {
		return out, held, nil
	}
	vals, _, err := s.ApplyValues(ctx, rest)
	if vals == nil {
		return nil, nil, err
	}
	j := 0
	for i := range events {
		if held[i] == nil {
			out[i] = vals[j]
			j++
		}
	}
	return out, held, err
}

// applyValues is ApplyValues, reading unless (nil: none) with the
// entities; when one of those keys holds a value it applies nothing and
// returns their values (ApplyValuesUnless).
func (s *Store) applyValues(ctx context.Context, events []*event.Envelope, unless []string) ([]*Values, []bool, [][]byte, error) {
	var ents []*entity
	// Every return below is the end of the batch's entities.
	defer func() { releaseEntities(ents) }()
	var arrs batchArrays
	out, reads, err := prepare(events, batchGrouping{byID: make(map[entityID]*entity, len(events)*2), ents: &ents}, &arrs)
	if err != nil {
		return nil, nil, nil, err
	}
	preps, replayed := arrs.preps, arrs.replayed
	if len(ents) == 0 {
		// Every event touches an entity: nothing to read or apply.
		return out, replayed, nil, nil
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
		held, err := s.takeOrLoad(ctx, pending, attempt == 1, unless)
		if err != nil {
			return nil, nil, nil, err
		}
		if unless = nil; held != nil {
			return nil, nil, held, nil // takeOrLoad let go of pending
		}
		r.now = s.now()
		s.computeAll(pending, r)
		var reread []*entity
		pending, reread = s.dropRereads(pending)
		if r.reads != nil {
			attachReads(pending, r)
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
			return nil, nil, nil, err
		}
		if len(lost) == 0 && len(reread) == 0 {
			break
		}
		s.cache.invalidate(lost)
		s.conflicts.Add(int64(len(lost)))
		if attempt == maxAttempts {
			return nil, nil, nil, fmt.Errorf("features: %d of %d entities still changed by another writer after %d attempts", len(lost), len(ents), attempt)
		}
		pending = again(lost, reread)
		// Another writer changed them between our read and write: read them
		// again, after a short random pause so two writers fall out of step.
		select {
		case <-ctx.Done():
			return nil, nil, nil, fmt.Errorf("features: %w", ctx.Err())
		case <-time.After(time.Duration(rand.Int64N(int64(attempt) * int64(time.Millisecond)))):
		}
	}
	if err := s.restore(ctx, ents, r); err != nil {
		return nil, nil, nil, err
	}
	if ce := corruptIn(ents); ce != nil {
		return out, replayed, nil, ce
	}
	return out, replayed, nil, nil
}

// takeOrLoad gives pending their values: from the cache when fromCache and
// it holds them (cache.go), else read from Redis in one pipeline, with
// unless (load); when one of those holds a value it lets go of pending.
func (s *Store) takeOrLoad(ctx context.Context, pending []*entity, fromCache bool, unless []string) ([][]byte, error) {
	s.cache.take(pending, fromCache)
	for _, e := range pending {
		if e.key == "" { // not in the cache
			e.key = s.key(e.eid.kind, e.eid.id)
		}
	}
	held, err := s.load(ctx, pending, unless)
	if err != nil || held != nil {
		// Failed, or nothing to apply this round (ApplyValuesUnless).
		s.cache.abort(pending)
	}
	return held, err
}

// again is what the next round of a batch reads, recomputes and writes:
// the entities whose write was lost and those whose cached value did not
// decode, read from Redis.
func again(lost, reread []*entity) []*entity {
	for _, e := range reread {
		e.reread = false
	}
	lost = append(lost, reread...)
	for _, e := range lost {
		e.hit = false
	}
	return lost
}

// dropRereads lets go of the entities whose cached value did not decode, to
// be read from Redis in the next round like a lost write: it returns the
// others, to write, and those.
func (s *Store) dropRereads(pending []*entity) (rest, reread []*entity) {
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
	return pending, reread
}

// attachReads puts the section of a counterparty paying in, which is only
// read, into the account's snapshot (computed in any order by computeAll).
func attachReads(pending []*entity, r *run) {
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

// corruptIn reports the entities of ents whose value did not decode, nil
// when every one did.
func corruptIn(ents []*entity) *CorruptError {
	var ce *CorruptError
	for _, e := range ents {
		if e.corrupt != nil {
			if ce == nil {
				ce = &CorruptError{Entities: map[string]int{}, Err: e.corrupt}
			}
			ce.Entities[kindName(e.eid.kind)]++
		}
	}
	return ce
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
