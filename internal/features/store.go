package features

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

// casLua writes a value only if the key still holds the generation it was
// read with (its first 8 bytes; a missing key reads as ""): the one piece
// of Lua, two commands.
const casLua = `if redis.call('GETRANGE', KEYS[1], 0, 7) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0`

// cas is loaded once per Redis node and called with EVALSHA; a node that
// answers NOSCRIPT gets the body (EVAL).
var cas = redis.NewScript(casLua)

// Defaults of Options.
const (
	DefaultKeyPrefix = "sp:"
	DefaultReplayTTL = 30 * time.Minute
)

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
}

// Store keeps the running totals of the stream's features in Redis.
type Store struct {
	client redis.UniversalClient
	prefix string
	ttl    time.Duration
	now    func() time.Time
	// beforeWrite, when set (tests), runs between computing a batch and
	// writing it: another writer can be made to step in.
	beforeWrite func(attempt int)
	// conflicts counts entity writes lost to another writer (and redone).
	conflicts atomic.Int64
}

// New returns a Store on client. It does no I/O.
func New(client redis.UniversalClient, o Options) *Store {
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if o.ReplayTTL <= 0 {
		o.ReplayTTL = DefaultReplayTTL
	}
	return &Store{client: client, prefix: o.KeyPrefix, ttl: o.ReplayTTL, now: time.Now}
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
	kind    byte
	key     string
	ops     []op
	raw     string // the value as read
	exists  bool
	corrupt error // the value as read did not decode: counted from empty
	st      *state
	changed bool
	val     []byte // the value to write
}

// Apply applies each event (transaction or account event) idempotently and
// returns, per event, its features as of right after it: the map of doc.go,
// ready for Bloblang (int64, bool, json.Number, map[string]any, nil). Two
// round trips per batch without conflict (doc.go "Apply"), each one pipeline
// that go-redis splits per node on a Cluster.
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
// an account event) remembered it as counted, so nothing changed and its
// features are read as they are now, not as they were when it was counted.
// The stream uses it to leave an event it has fully evaluated before alone.
func (s *Store) ApplyReplays(ctx context.Context, events []*event.Envelope) ([]map[string]any, []bool, error) {
	preps := make([]prep, len(events))
	byKey := make(map[string]*entity, len(events)*2)
	var ents []*entity
	use := func(kind byte, id event.UUID, ev int, mode byte) {
		k := s.key(kind, id)
		e := byKey[k]
		if e == nil {
			e = &entity{kind: kind, key: k}
			byKey[k] = e
			ents = append(ents, e)
		}
		e.ops = append(e.ops, op{ev: ev, mode: mode})
	}
	out := make([]map[string]any, len(events))
	for i, e := range events {
		p := &preps[i]
		p.at = e.OccurredAt.Unix()
		p.idh = idHash(e.ID)
		switch e.Kind {
		case event.KindTransaction:
			out[i] = map[string]any{"account": nil, "customer": nil, "counterparty": nil}
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
			}
		case event.KindAccountEvent:
			out[i] = map[string]any{"customer": nil}
			use(entityCustomer, event.CustomerID(e.WorkspaceID, e.CustomerExternalID), i, modeEvent)
		default:
			return nil, nil, fmt.Errorf("features: event %d: unknown kind", i)
		}
	}
	replayed := make([]bool, len(events))
	if len(ents) == 0 {
		return out, replayed, nil
	}
	pending := ents
	for attempt := 1; ; attempt++ {
		if err := s.load(ctx, pending); err != nil {
			return nil, nil, err
		}
		now := s.now()
		for _, e := range pending {
			s.compute(e, events, preps, out, replayed, now)
		}
		if s.beforeWrite != nil {
			s.beforeWrite(attempt)
		}
		lost, err := s.write(ctx, pending)
		if err != nil {
			return nil, nil, err
		}
		if len(lost) == 0 {
			break
		}
		s.conflicts.Add(int64(len(lost)))
		if attempt == maxAttempts {
			return nil, nil, fmt.Errorf("features: %d of %d entities still changed by another writer after %d attempts", len(lost), len(ents), attempt)
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
	var ce *CorruptError
	for _, e := range ents {
		if e.corrupt != nil {
			if ce == nil {
				ce = &CorruptError{Entities: map[string]int{}, Err: e.corrupt}
			}
			ce.Entities[kindName(e.kind)]++
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
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range ents {
			cmds[i] = p.Get(ctx, e.key)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("features: redis: reading %d entities: %w", len(ents), err)
	}
	for i, e := range ents {
		v, err := cmds[i].Result()
		switch {
		case errors.Is(err, redis.Nil):
			e.raw, e.exists = "", false
		case err != nil:
			return fmt.Errorf("features: redis: reading a %s: %w", kindName(e.kind), err)
		default:
			e.raw, e.exists = v, true
		}
	}
	return nil
}

// compute applies e's events to its state as read and records their
// features.
func (s *Store) compute(e *entity, events []*event.Envelope, preps []prep, out []map[string]any, replayed []bool, now time.Time) {
	e.corrupt = nil
	e.st = newState()
	if e.exists {
		st, err := decode(e.raw)
		if err != nil {
			e.corrupt = err
		} else {
			e.st = st
		}
	}
	st := e.st
	nowMs, ttlMs := now.UnixMilli(), s.ttl.Milliseconds()
	e.changed = e.corrupt != nil
	for _, o := range e.ops {
		ev, p := events[o.ev], &preps[o.ev]
		switch o.mode {
		case modeRead:
			m := make(map[string]any, 6)
			st.putCounterparty(m, ev.Currency)
			out[o.ev]["counterparty"] = m
		case modeEvent:
			seen := st.replay(p.idh, nowMs, ttlMs)
			if !seen {
				st.applyEvent(p.at, ev.Type)
				e.changed = true
			}
			replayed[o.ev] = seen
			m := make(map[string]any, 5)
			st.putEvents(m, p.at)
			out[o.ev]["customer"] = m
		case modeTxn:
			seen := st.replay(p.idh, nowMs, ttlMs)
			newcp, ssp := false, int64(-1)
			if !seen {
				var member *event.UUID
				switch {
				case e.kind == entityCounterparty:
					member = &p.acct
				case p.hasCP:
					member = &p.cp
				}
				newcp, ssp = st.applyTxn(p.at, p.in, ev.Currency, p.units, p.sum, member)
				e.changed = true
			}
			switch e.kind {
			case entityAccount:
				replayed[o.ev] = seen
				m := make(map[string]any, 22)
				st.putTransaction(m, ev.Currency, newcp, ssp)
				out[o.ev]["account"] = m
			case entityCustomer:
				m := make(map[string]any, 27)
				st.putTransaction(m, ev.Currency, newcp, ssp)
				st.putEvents(m, p.at)
				out[o.ev]["customer"] = m
			case entityCounterparty:
				m := make(map[string]any, 6)
				st.putCounterparty(m, ev.Currency)
				out[o.ev]["counterparty"] = m
			}
		}
	}
	if e.changed {
		st.prune(nowMs)
		// A new key starts at a random generation: should a key expire and
		// be created again between another writer's read and write, that
		// writer's CAS still fails.
		gen := rand.Uint64()
		if e.exists {
			gen = generation(e.raw) + 1
		}
		e.val = encode(e.val[:0], gen, st)
	}
}

// write stores every changed entity in one pipeline, each only if nobody
// wrote it since it was read (SET NX for a key that did not exist, the CAS
// script otherwise), and returns those somebody did.
func (s *Store) write(ctx context.Context, ents []*entity) ([]*entity, error) {
	type w struct {
		e   *entity
		nx  *redis.BoolCmd
		cas *redis.Cmd
	}
	ws := make([]w, 0, len(ents))
	ttlArg := int64(keyTTL / time.Second)
	pipe := s.client.Pipeline()
	for _, e := range ents {
		if !e.changed {
			continue
		}
		x := w{e: e}
		if !e.exists {
			x.nx = pipe.SetNX(ctx, e.key, e.val, keyTTL)
		} else {
			x.cas = cas.EvalSha(ctx, pipe, []string{e.key}, e.raw[:min(genLen, len(e.raw))], e.val, ttlArg)
		}
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
			var cerr error
			if x.nx != nil {
				cerr = x.nx.Err()
			} else {
				cerr = x.cas.Err()
			}
			if cerr == nil || errors.Is(cerr, redis.Nil) {
				continue
			}
			if x.cas == nil || !redis.HasErrorPrefix(cerr, "NOSCRIPT") {
				return nil, fmt.Errorf("features: redis: writing a %s: %w", kindName(x.e.kind), cerr)
			}
			again = append(again, i)
		}
		if len(again) > 0 {
			pipe = s.client.Pipeline()
			for _, i := range again {
				e := ws[i].e
				ws[i].cas = cas.Eval(ctx, pipe, []string{e.key}, e.raw[:min(genLen, len(e.raw))], e.val, ttlArg)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return nil, fmt.Errorf("features: redis (script reload): %w", err)
			}
		}
	}
	var lost []*entity
	for _, x := range ws {
		ok := false
		if x.nx != nil {
			ok = x.nx.Val()
		} else {
			n, err := x.cas.Int64()
			if err != nil {
				return nil, fmt.Errorf("features: redis: writing a %s: %w", kindName(x.e.kind), err)
			}
			ok = n == 1
		}
		if !ok {
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
