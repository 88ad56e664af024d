package features

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

//go:embed apply.lua
var applyLua string

// script is loaded once per Redis node and called with EVALSHA; go-redis
// sends the script body again when a node answers NOSCRIPT.
var script = redis.NewScript(applyLua)

// Defaults of Options.
const (
	DefaultKeyPrefix = "sp:"
	DefaultReplayTTL = 30 * time.Minute
)

// TTLs of the keys (doc.go): the window a hash serves plus a margin, so an
// entity silent for longer than that is forgotten as a unit.
const (
	ttlMinute = 2 * time.Hour       // 1 h window + 1 h
	ttlHour   = 48 * time.Hour      // 24 h window + 24 h
	ttlDay    = 31 * 24 * time.Hour // 30 d window + 1 d; also the counterparty zsets
)

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

// keys returns the six keys of one entity, all in its hash tag.
func (s *Store) keys(entity byte, id event.UUID) []string {
	base := s.prefix + "{" + string(entity) + ":" + id.String() + "}:"
	return []string{base + "r", base + "m", base + "h", base + "d", base + "po", base + "pi"}
}

// call is one Lua call: one event on one entity.
type call struct {
	event  int  // index in the batch
	entity byte // entityAccount, …
	cmd    *redis.Cmd
	keys   []string
	args   []any
}

// latestKept are the account event types whose latest time is a feature.
var latestKept = map[string]bool{"sim_swap": true, "profile_change": true}

func (s *Store) args(mode string, e *event.Envelope, entity byte, dir, cur, units string, member []byte, etype string) []any {
	keep := "0"
	if latestKept[etype] {
		keep = "1"
	}
	events := "0"
	if entity == entityCustomer {
		events = "1"
	}
	var id []byte
	var at int64
	if e != nil {
		id = e.ID[:]
		at = e.OccurredAt.Unix()
	} else {
		id = []byte{}
	}
	// Bucket numbers are computed here (floor division: times before 1970
	// are refused by Decode, so plain division is floor), which spares the
	// script string formatting, its slowest operation.
	bucket := func(g int64) string { return strconv.FormatInt(at/g, 10) + ":" }
	return []any{
		mode, id, s.now().UnixMilli(), s.ttl.Milliseconds(), at,
		dir, cur, units, member, etype,
		int64(ttlMinute / time.Second), int64(ttlHour / time.Second), int64(ttlDay / time.Second), keep,
		bucket(60), bucket(3600), bucket(86400), events,
	}
}

// Apply applies each event (transaction or account event) idempotently and
// returns, per event, its features as of right after it: the map of doc.go,
// ready for Bloblang (int64, bool, json.Number, map[string]any, nil). One
// round trip per batch: all Lua calls go in one pipeline, which go-redis
// splits per node on a Cluster.
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
	calls := make([]call, 0, 3*len(events))
	for i, e := range events {
		switch e.Kind {
		case event.KindTransaction:
			dir := "o"
			if e.Direction == event.DirectionIn {
				dir = "i"
			}
			units, err := toUnits(e.Amount)
			if err != nil {
				// Counted, left out of the sums: see doc.go.
				units = "0"
			}
			acct := event.AccountID(e.WorkspaceID, e.AccountExternalID)
			var cp event.UUID
			var cpMember []byte
			if e.Counterparty != nil && e.Counterparty.Fingerprint != "" {
				cp = event.CounterpartyID(e.WorkspaceID, e.Counterparty.Fingerprint)
				cpMember = cp[:]
			}
			calls = append(calls, call{event: i, entity: entityAccount, keys: s.keys(entityAccount, acct),
				args: s.args("t", e, entityAccount, dir, e.Currency, units, cpMember, "")})
			if e.CustomerExternalID != "" {
				cust := event.CustomerID(e.WorkspaceID, e.CustomerExternalID)
				calls = append(calls, call{event: i, entity: entityCustomer, keys: s.keys(entityCustomer, cust),
					args: s.args("t", e, entityCustomer, dir, e.Currency, units, cpMember, "")})
			}
			if cpMember != nil {
				// A counterparty's features are about payments to it: money
				// it sends only reads them (a cheaper call).
				mode := "t"
				if dir == "i" {
					mode = "r"
				}
				calls = append(calls, call{event: i, entity: entityCounterparty, keys: s.keys(entityCounterparty, cp),
					args: s.args(mode, e, entityCounterparty, dir, e.Currency, units, acct[:], "")})
			}
		case event.KindAccountEvent:
			cust := event.CustomerID(e.WorkspaceID, e.CustomerExternalID)
			calls = append(calls, call{event: i, entity: entityCustomer, keys: s.keys(entityCustomer, cust),
				args: s.args("e", e, entityCustomer, "", "", "0", nil, strings.ReplaceAll(e.Type, "\x01", "_"))})
		default:
			return nil, nil, fmt.Errorf("features: event %d: unknown kind", i)
		}
	}
	if err := s.run(ctx, calls); err != nil {
		return nil, nil, err
	}
	out := make([]map[string]any, len(events))
	replayed := make([]bool, len(events))
	for i, e := range events {
		if e.Kind == event.KindTransaction {
			out[i] = map[string]any{"account": nil, "customer": nil, "counterparty": nil}
		} else {
			out[i] = map[string]any{"customer": nil}
		}
	}
	for _, c := range calls {
		r, err := parseReply(c.cmd)
		if err != nil {
			return nil, nil, err
		}
		e := events[c.event]
		if c.entity == entityAccount || e.Kind == event.KindAccountEvent {
			replayed[c.event] = r.seen
		}
		switch {
		case e.Kind == event.KindAccountEvent:
			out[c.event]["customer"] = r.accountEventFeatures()
		case c.entity == entityAccount:
			out[c.event]["account"] = r.transactionFeatures()
		case c.entity == entityCustomer:
			f := r.transactionFeatures()
			for k, v := range r.accountEventFeatures() {
				f[k] = v
			}
			out[c.event]["customer"] = f
		case c.entity == entityCounterparty:
			out[c.event]["counterparty"] = r.counterpartyFeatures()
		}
	}
	return out, replayed, nil
}

// run sends every call in one pipeline. A node that lost its scripts
// (restart, SCRIPT FLUSH, failover) answers NOSCRIPT to each of its calls
// without running any, so exactly those are sent again, in order, with the
// body (EVALSHA's fallback): events of one entity share a node, so their
// order is kept.
func (s *Store) run(ctx context.Context, calls []call) error {
	if len(calls) == 0 {
		return nil
	}
	pipe := s.client.Pipeline()
	for i := range calls {
		calls[i].cmd = script.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, err := pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	var again []int
	for i := range calls {
		if cerr := calls[i].cmd.Err(); cerr != nil {
			if !redis.HasErrorPrefix(cerr, "NOSCRIPT") {
				return fmt.Errorf("features: redis: %w", cerr)
			}
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return fmt.Errorf("features: redis: %w", err)
	}
	pipe = s.client.Pipeline()
	for _, i := range again {
		calls[i].cmd = script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("features: redis (script reload): %w", err)
	}
	return nil
}

// reply is one Lua call's answer, in the order the script returns it.
type reply struct {
	seen                        bool
	v                           []any // positions 1..20: counts, sums, distincts
	newcp                       bool
	ssp, sinceSimSwap, sinceChg int64
	ev1h, ev24h, ev7d           map[string]any
}

var errReply = errors.New("features: unexpected reply from the Lua script")

func parseReply(cmd *redis.Cmd) (*reply, error) {
	raw, err := cmd.Slice()
	if err != nil {
		return nil, fmt.Errorf("features: redis: %w", err)
	}
	if len(raw) != 28 {
		return nil, errReply
	}
	r := &reply{v: raw[1:21]}
	r.seen = raw[0] == int64(1)
	r.newcp = raw[21] == int64(1)
	var ok1, ok2, ok3 bool
	r.ssp, ok1 = raw[22].(int64)
	r.sinceSimSwap, ok2 = raw[23].(int64)
	r.sinceChg, ok3 = raw[24].(int64)
	if !ok1 || !ok2 || !ok3 {
		return nil, errReply
	}
	for i, dst := range []*map[string]any{&r.ev1h, &r.ev24h, &r.ev7d} {
		pairs, _ := raw[25+i].([]any)
		m := make(map[string]any, len(pairs)/2)
		for j := 0; j+1 < len(pairs); j += 2 {
			k, _ := pairs[j].(string)
			n, ok := pairs[j+1].(int64)
			if !ok {
				return nil, errReply
			}
			m[k] = n
		}
		*dst = m
	}
	return r, nil
}

// Positions in reply.v (the script's return value, less its first element).
const (
	pOC1h = iota
	pIC1h
	pOS1h
	pIS1h
	pOC24h
	pIC24h
	pOS24h
	pIS24h
	pDP24h
	pDS24h
	pOC7d
	pIC7d
	pOS7d
	pIS7d
	pOC30d
	pIC30d
	pOS30d
	pIS30d
	pDP30d
	pDS30d
)

// The script answers an exact integer as an integer and a sum beyond 2^53
// units as the decimal string Redis keeps.
func (r *reply) count(p int) int64 {
	switch v := r.v[p].(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

func (r *reply) sum(p int) json.Number {
	switch v := r.v[p].(type) {
	case int64:
		return fromUnits(strconv.FormatInt(v, 10))
	case string:
		return fromUnits(v)
	}
	return fromUnits(nil)
}

func (r *reply) transactionFeatures() map[string]any {
	return map[string]any{
		"out_count_1h": r.count(pOC1h), "out_count_24h": r.count(pOC24h),
		"out_count_7d": r.count(pOC7d), "out_count_30d": r.count(pOC30d),
		"in_count_1h": r.count(pIC1h), "in_count_24h": r.count(pIC24h),
		"in_count_7d": r.count(pIC7d), "in_count_30d": r.count(pIC30d),
		"out_sum_1h": r.sum(pOS1h), "out_sum_24h": r.sum(pOS24h),
		"out_sum_7d": r.sum(pOS7d), "out_sum_30d": r.sum(pOS30d),
		"in_sum_1h": r.sum(pIS1h), "in_sum_24h": r.sum(pIS24h),
		"in_sum_7d": r.sum(pIS7d), "in_sum_30d": r.sum(pIS30d),
		"distinct_payees_24h": r.count(pDP24h), "distinct_payees_30d": r.count(pDP30d),
		"distinct_senders_24h": r.count(pDS24h), "distinct_senders_30d": r.count(pDS30d),
		"new_counterparty":       r.newcp,
		"seconds_since_previous": r.ssp,
	}
}

func (r *reply) accountEventFeatures() map[string]any {
	return map[string]any{
		"events_1h": r.ev1h, "events_24h": r.ev24h, "events_7d": r.ev7d,
		"seconds_since_sim_swap":       r.sinceSimSwap,
		"seconds_since_profile_change": r.sinceChg,
	}
}

func (r *reply) counterpartyFeatures() map[string]any {
	return map[string]any{
		"paid_count_24h": r.count(pOC24h), "paid_count_30d": r.count(pOC30d),
		"paid_sum_24h": r.sum(pOS24h), "paid_sum_30d": r.sum(pOS30d),
		"distinct_payers_24h": r.count(pDP24h), "distinct_payers_30d": r.count(pDP30d),
	}
}

// read runs the script read-only for one entity.
func (s *Store) read(ctx context.Context, entity byte, id event.UUID, currency string) (*reply, error) {
	c := []call{{entity: entity, keys: s.keys(entity, id), args: s.args("r", nil, entity, "", currency, "0", nil, "")}}
	if err := s.run(ctx, c); err != nil {
		return nil, err
	}
	return parseReply(c[0].cmd)
}

// ReadAccount returns an account's features as of its own head (sums in
// currency) without changing anything; new_counterparty is false and
// seconds_since_previous is measured from the head's latest event.
func (s *Store) ReadAccount(ctx context.Context, workspace event.UUID, accountExternalID, currency string) (map[string]any, error) {
	r, err := s.read(ctx, entityAccount, event.AccountID(workspace, accountExternalID), currency)
	if err != nil {
		return nil, err
	}
	return r.transactionFeatures(), nil
}

// ReadCustomer is ReadAccount for a customer: the transaction features and
// the account event ones.
func (s *Store) ReadCustomer(ctx context.Context, workspace event.UUID, customerExternalID, currency string) (map[string]any, error) {
	r, err := s.read(ctx, entityCustomer, event.CustomerID(workspace, customerExternalID), currency)
	if err != nil {
		return nil, err
	}
	f := r.transactionFeatures()
	for k, v := range r.accountEventFeatures() {
		f[k] = v
	}
	return f, nil
}

// ReadCounterparty is ReadAccount for a counterparty, named by its
// de-duplication fingerprint.
func (s *Store) ReadCounterparty(ctx context.Context, workspace event.UUID, fingerprint, currency string) (map[string]any, error) {
	r, err := s.read(ctx, entityCounterparty, event.CounterpartyID(workspace, fingerprint), currency)
	if err != nil {
		return nil, err
	}
	return r.counterpartyFeatures(), nil
}
