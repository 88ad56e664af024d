package features

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/redisconn"
)

// target is one Redis the tests run on: the single one and the Cluster.
type target struct {
	name string
	url  func(testing.TB) string
}

var targets = []target{
	{"single", testenv.RedisURL},
	{"cluster", testenv.RedisClusterURL},
}

// counter counts what reaches the network: single commands and pipelines
// (on a Cluster, one pipeline per node: the hook sits on the node clients).
type counter struct{ single, pipelines, piped atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.single.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.pipelines.Add(1)
		c.piped.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
func (c *counter) reset() { c.single.Store(0); c.pipelines.Store(0); c.piped.Store(0) }

// open connects to tg with a counting hook and a key prefix of the test's
// own, and removes the test's keys afterwards.
func open(t testing.TB, tg target) (redis.UniversalClient, string, *counter) {
	t.Helper()
	c, err := redisconn.Open(tg.url(t))
	if err != nil {
		t.Fatal(err)
	}
	cnt := &counter{}
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(cnt) })
	} else {
		c.AddHook(cnt)
	}
	prefix := fmt.Sprintf("sptest:%s:%d:", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano())
	t.Cleanup(func() {
		ctx := context.Background()
		del := func(ctx context.Context, n *redis.Client) error {
			iter := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				n.Del(ctx, iter.Val())
			}
			return iter.Err()
		}
		if cc, ok := c.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, del)
		} else {
			_ = del(ctx, c.(*redis.Client))
		}
		c.Close()
	})
	return c, prefix, cnt
}

// ---------------------------------------------------------------------------
// The independent computation: every counted event kept in a list per
// entity, every feature recomputed from scratch by its definition.

type modelEvent struct {
	env    *event.Envelope
	member string // the other side: counterparty id for accounts and customers, account id for counterparties
	units  *big.Int
}

type model struct {
	events map[string][]modelEvent   // entity key -> counted events
	seen   map[string]bool           // entity key + event id
	first  map[string]*modelFeatures // entity key + event id -> features of its first application
	reads  map[string]map[string]any // event id -> a paying-in counterparty's features then
}

func newModel() *model {
	return &model{events: map[string][]modelEvent{}, seen: map[string]bool{},
		first: map[string]*modelFeatures{}, reads: map[string]map[string]any{}}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func bigUnits(s string) *big.Int {
	u, err := toUnits(s)
	if err != nil {
		return new(big.Int)
	}
	n, _ := new(big.Int).SetString(u, 10)
	return n
}

func fmtUnits(n *big.Int) json.Number {
	neg := n.Sign() < 0
	s := new(big.Int).Abs(n).String()
	for len(s) < 5 {
		s = "0" + s
	}
	out := s[:len(s)-4] + "." + s[len(s)-4:]
	if neg {
		out = "-" + out
	}
	return json.Number(out)
}

// apply counts e for one entity and returns the features right after it.
func (m *model) apply(key string, e *event.Envelope, member string) *modelFeatures {
	id := key + string(e.ID[:])
	replay := m.seen[id]
	var prev []modelEvent
	prev = append(prev, m.events[key]...)
	if replay {
		// A replay inside the TTL gets its first application's features.
		return m.first[id]
	}
	m.seen[id] = true
	m.events[key] = append(m.events[key], modelEvent{env: e, member: member, units: bigUnits(e.Amount)})
	f := computeFeatures(m.events[key], prev, e, member, false)
	m.first[id] = f
	return f
}

type modelFeatures struct {
	txn, acctEvent, cp map[string]any
}

func computeFeatures(all, prev []modelEvent, e *event.Envelope, member string, replay bool) *modelFeatures {
	var mx int64 = -1 << 62
	for _, x := range all {
		mx = max(mx, x.env.OccurredAt.Unix())
	}
	headMin, headHour, headDay := floorDiv(mx, 60), floorDiv(mx, 3600), floorDiv(mx, 86400)
	type win struct {
		name string
		in   func(ts int64) bool
	}
	wins := []win{
		{"1h", func(ts int64) bool { return floorDiv(ts, 60) > headMin-60 }},
		{"24h", func(ts int64) bool { return floorDiv(ts, 3600) > headHour-24 }},
		{"7d", func(ts int64) bool { return floorDiv(ts, 86400) > headDay-7 }},
		{"30d", func(ts int64) bool { return floorDiv(ts, 86400) > headDay-30 }},
	}
	in30 := wins[3].in
	f := &modelFeatures{txn: map[string]any{}, acctEvent: map[string]any{}, cp: map[string]any{}}
	for _, w := range wins {
		for _, d := range []event.Direction{event.DirectionOut, event.DirectionIn} {
			var n int64
			sum := new(big.Int)
			distinct := map[string]bool{}
			for _, x := range all {
				if x.env.Kind != event.KindTransaction || x.env.Direction != d || !w.in(x.env.OccurredAt.Unix()) {
					continue
				}
				n++
				if x.env.Currency == e.Currency {
					sum.Add(sum, x.units)
				}
				if x.member != "" {
					distinct[x.member] = true
				}
			}
			f.txn[string(d)+"_count_"+w.name] = n
			f.txn[string(d)+"_sum_"+w.name] = fmtUnits(sum)
			if w.name == "24h" || w.name == "30d" {
				kind := map[event.Direction]string{event.DirectionOut: "payees", event.DirectionIn: "senders"}[d]
				f.txn["distinct_"+kind+"_"+w.name] = int64(len(distinct))
				if d == event.DirectionOut {
					f.cp["paid_count_"+w.name] = n
					f.cp["paid_sum_"+w.name] = fmtUnits(sum)
					f.cp["distinct_payers_"+w.name] = int64(len(distinct))
				}
			}
		}
	}
	t := e.OccurredAt.Unix()
	since := func(latest int64, ok bool) int64 {
		if !ok || !in30(latest) {
			return -1
		}
		if latest > t {
			return 0
		}
		return t - latest
	}
	newcp := member != ""
	var prevT int64
	havePrev := false
	for _, x := range prev {
		if x.env.Kind != event.KindTransaction {
			continue
		}
		if x.member == member && in30(x.env.OccurredAt.Unix()) {
			newcp = false
		}
		if !havePrev || x.env.OccurredAt.Unix() > prevT {
			prevT, havePrev = x.env.OccurredAt.Unix(), true
		}
	}
	ssp := since(prevT, havePrev)
	if replay {
		newcp, ssp = false, -1
	}
	f.txn["new_counterparty"] = newcp
	f.txn["seconds_since_previous"] = ssp
	for _, w := range wins[:3] {
		counts := map[string]any{}
		for _, x := range all {
			if x.env.Kind == event.KindAccountEvent && w.in(x.env.OccurredAt.Unix()) {
				n, _ := counts[x.env.Type].(int64)
				counts[x.env.Type] = n + 1
			}
		}
		f.acctEvent["events_"+w.name] = counts
	}
	for _, typ := range []string{"sim_swap", "profile_change"} {
		var latest int64
		ok := false
		for _, x := range all {
			if x.env.Kind == event.KindAccountEvent && x.env.Type == typ && (!ok || x.env.OccurredAt.Unix() > latest) {
				latest, ok = x.env.OccurredAt.Unix(), true
			}
		}
		f.acctEvent["seconds_since_"+typ] = since(latest, ok)
	}
	return f
}

// expect is what Apply must return for e, from the model.
func (m *model) expect(e *event.Envelope) map[string]any {
	if e.Kind == event.KindAccountEvent {
		c := m.apply("c"+e.CustomerExternalID, e, "")
		return map[string]any{"customer": c.acctEvent}
	}
	out := map[string]any{"account": nil, "customer": nil, "counterparty": nil}
	cp := ""
	if e.Counterparty != nil {
		cp = e.Counterparty.Fingerprint
	}
	acctReplay := m.seen["a"+e.AccountExternalID+string(e.ID[:])]
	out["account"] = m.apply("a"+e.AccountExternalID, e, cp).txn
	if e.CustomerExternalID != "" {
		c := m.apply("c"+e.CustomerExternalID, e, cp)
		f := c.txn
		for k, v := range c.acctEvent {
			f[k] = v
		}
		out["customer"] = f
	}
	if cp != "" {
		if e.Direction == event.DirectionOut {
			out["counterparty"] = m.apply("p"+cp, e, e.AccountExternalID).cp
		} else {
			// Only payments to a counterparty are its events.
			// A replay gets them as they were read the first time (they
			// travel in the account's snapshot).
			key := "p" + cp
			if acctReplay {
				out["counterparty"] = m.reads[string(e.ID[:])]
			} else {
				f := computeFeatures(m.events[key], m.events[key], e, e.AccountExternalID, true).cp
				m.reads[string(e.ID[:])] = f
				out["counterparty"] = f
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------------

var testWorkspace = event.UUID{0x01, 0x8f, 0x2c, 0x4a, 0x11, 0x22, 0x73, 0x44, 0x85, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc}

// genEvents makes n random events: several accounts, customers,
// counterparties and currencies, times mostly moving forward by seconds to
// minutes but also arriving late and jumping ahead by more than each window.
func genEvents(r *rand.Rand, n int, base time.Time) []*event.Envelope {
	accounts := []string{"acc-1", "acc-2", "acc-3"}
	customerOf := map[string]string{"acc-1": "cust-1", "acc-2": "cust-1", "acc-3": "cust-2"}
	cps := []string{"fp-a", "fp-b", "fp-c", "fp-d", "fp-e"}
	currencies := []string{"EUR", "EUR", "USD", "JPY"}
	types := []string{"sign_in", "failed_otp", "sim_swap", "profile_change"}
	now := base
	var out []*event.Envelope
	for i := range n {
		switch p := r.IntN(100); {
		case p < 60:
			now = now.Add(time.Duration(r.IntN(600)) * time.Second)
		case p < 80:
			now = now.Add(time.Duration(r.IntN(3*3600)) * time.Second)
		case p < 85:
			now = now.Add(time.Duration(1+r.IntN(3)) * 24 * time.Hour)
		case p < 87:
			now = now.Add(time.Duration(8+r.IntN(30)) * 24 * time.Hour)
		}
		occurred := now
		if r.IntN(100) < 15 { // late arrival: up to 40 days behind
			occurred = now.Add(-time.Duration(r.Int64N(int64(40 * 24 * time.Hour))))
		}
		occurred = occurred.Truncate(time.Second).UTC()
		ext := fmt.Sprintf("ev-%d", i)
		acct := accounts[r.IntN(len(accounts))]
		if r.IntN(100) < 25 {
			typ := types[r.IntN(len(types))]
			out = append(out, &event.Envelope{V: 1, Kind: event.KindAccountEvent,
				ID: event.AccountEventID(testWorkspace, ext, occurred), WorkspaceID: testWorkspace, ExternalID: ext,
				OccurredAt: occurred, CustomerExternalID: customerOf[acct], Type: typ})
			continue
		}
		e := &event.Envelope{V: 1, Kind: event.KindTransaction,
			ID: event.TransactionID(testWorkspace, ext, occurred), WorkspaceID: testWorkspace, ExternalID: ext,
			OccurredAt: occurred, AccountExternalID: acct, Currency: currencies[r.IntN(len(currencies))],
			Direction: event.DirectionOut}
		if r.IntN(2) == 0 {
			e.Direction = event.DirectionIn
		}
		if r.IntN(100) < 80 {
			e.CustomerExternalID = customerOf[acct]
		}
		if r.IntN(100) < 75 {
			e.Counterparty = &event.Counterparty{Fingerprint: cps[r.IntN(len(cps))]}
		}
		switch r.IntN(4) {
		case 0:
			e.Amount = fmt.Sprintf("%d", r.IntN(100000))
		case 1:
			e.Amount = fmt.Sprintf("%d.%02d", r.IntN(10000), r.IntN(100))
		case 2:
			e.Amount = fmt.Sprintf("%d.%06d", r.IntN(1000), r.IntN(1000000)) // rounded to 4 places
		default:
			e.Amount = fmt.Sprintf("%d%09d.9999", 1+r.IntN(99), r.IntN(1000000000)) // up to 10^11
		}
		out = append(out, e)
	}
	return out
}

// withReplays repeats some events later in the stream (same envelope).
func withReplays(r *rand.Rand, evs []*event.Envelope) []*event.Envelope {
	var out []*event.Envelope
	for i, e := range evs {
		out = append(out, e)
		if i > 0 && r.IntN(100) < 10 {
			out = append(out, evs[r.IntN(i+1)])
		}
	}
	return out
}

// Every event's features equal those of an independent model (model, above)
// applied in the same order, replays included, over batches of random size.
// Also with a cache of 4 KiB, which evicts nearly every state the batch
// after it was published: the next decodes get the evicted states' arenas
// (arena.go) with their old contents, and must come out the same.
func TestApplyMatchesIndependentComputation(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 4; seed++ {
				// Seeds 1-3 with the default cache, 4 with the tiny one.
				cacheBytes := int64(0)
				if seed == 4 {
					cacheBytes = 4 << 10
				}
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					c, prefix, _ := open(t, tg)
					s := New(c, Options{KeyPrefix: prefix, CacheBytes: cacheBytes})
					r := rand.New(rand.NewPCG(seed, 42))
					evs := withReplays(r, genEvents(r, 1500, time.Date(2026, 3, 1, 23, 50, 0, 0, time.UTC)))
					m := newModel()
					ctx := context.Background()
					for i := 0; i < len(evs); {
						n := min(1+r.IntN(60), len(evs)-i)
						got, err := s.Apply(ctx, evs[i:i+n])
						if err != nil {
							t.Fatal(err)
						}
						for j, e := range evs[i : i+n] {
							want := m.expect(e)
							if !reflect.DeepEqual(got[j], want) {
								t.Fatalf("event %d (%s at %s):\n%s", i+j, e.Kind, e.OccurredAt, diff(got[j], want))
							}
						}
						i += n
					}
					assertTTLs(t, c, prefix)
				})
			}
		})
	}
}

// diff lists the features that differ.
func diff(got, want map[string]any) string {
	var lines []string
	for _, ent := range []string{"account", "customer", "counterparty"} {
		g, _ := got[ent].(map[string]any)
		w, _ := want[ent].(map[string]any)
		if (g == nil) != (w == nil) {
			lines = append(lines, fmt.Sprintf("%s: got %v, want %v", ent, g, w))
			continue
		}
		for k := range w {
			if !reflect.DeepEqual(g[k], w[k]) {
				lines = append(lines, fmt.Sprintf("%s.%s: got %v (%T), want %v (%T)", ent, k, g[k], g[k], w[k], w[k]))
			}
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				lines = append(lines, fmt.Sprintf("%s.%s: unexpected %v", ent, k, g[k]))
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// assertTTLs checks that every key under prefix expires: memory stays bounded.
func assertTTLs(t *testing.T, c redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	check := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			ttl, err := n.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				return err
			}
			if ttl <= 0 {
				return fmt.Errorf("key %q has no TTL (%v)", iter.Val(), ttl)
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, check)
	} else {
		err = check(ctx, c.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
}

func txn(ext, acct, cust, cp, amount, cur string, dir event.Direction, at time.Time) *event.Envelope {
	e := &event.Envelope{V: 1, Kind: event.KindTransaction, ID: event.TransactionID(testWorkspace, ext, at),
		WorkspaceID: testWorkspace, ExternalID: ext, OccurredAt: at, AccountExternalID: acct,
		CustomerExternalID: cust, Amount: amount, Currency: cur, Direction: dir}
	if cp != "" {
		e.Counterparty = &event.Counterparty{Fingerprint: cp}
	}
	return e
}

func TestReplayWithinTTLChangesNothingAndCountsAgainAfter(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			s := New(c, Options{KeyPrefix: prefix, ReplayTTL: 1500 * time.Millisecond})
			ctx := context.Background()
			at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
			e := txn("t1", "acc", "cust", "fp", "10.50", "EUR", event.DirectionOut, at)
			first, err := s.Apply(ctx, []*event.Envelope{e})
			if err != nil {
				t.Fatal(err)
			}
			acct := first[0]["account"].(map[string]any)
			if acct["out_count_1h"] != int64(1) || acct["out_sum_30d"] != json.Number("10.5000") || acct["new_counterparty"] != true {
				t.Fatalf("first application: %v", acct)
			}
			before := readAll(t, s, "EUR")
			// The same event again, three times in one batch and once more.
			_, replayed, err := s.ApplyReplays(ctx, []*event.Envelope{e, e, e})
			if err != nil {
				t.Fatal(err)
			}
			if !replayed[0] || !replayed[1] || !replayed[2] {
				t.Errorf("replays not reported as such: %v", replayed)
			}
			if _, err := s.Apply(ctx, []*event.Envelope{e}); err != nil {
				t.Fatal(err)
			}
			if after := readAll(t, s, "EUR"); !reflect.DeepEqual(before, after) {
				t.Fatalf("a replay inside the TTL changed the totals:\nbefore %v\nafter  %v", before, after)
			}
			time.Sleep(1700 * time.Millisecond)
			again, err := s.Apply(ctx, []*event.Envelope{e})
			if err != nil {
				t.Fatal(err)
			}
			acct = again[0]["account"].(map[string]any)
			if acct["out_count_1h"] != int64(2) || acct["out_sum_30d"] != json.Number("21.0000") {
				t.Fatalf("a replay after the TTL should count again: %v", acct)
			}
		})
	}
}

func readAll(t *testing.T, s *Store, cur string) []map[string]any {
	t.Helper()
	ctx := context.Background()
	a, err := s.ReadAccount(ctx, testWorkspace, "acc", cur)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.ReadCustomer(ctx, testWorkspace, "cust", cur)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.ReadCounterparty(ctx, testWorkspace, "fp", cur)
	if err != nil {
		t.Fatal(err)
	}
	return []map[string]any{a, c, p}
}

// A batch without conflicts is exactly two pipelined round trips: one GET
// per entity, then the writes of the entities that changed (on a Cluster,
// each round trip is one pipeline per master).
func TestTwoRoundTripsPerBatch(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, cnt := open(t, tg)
			// Without the cache: every entity is read (TestCacheSkipsReads).
			s := New(c, Options{KeyPrefix: prefix, CacheBytes: -1})
			ctx := context.Background()
			evs := realistic(1200, 300, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), 7)
			// Warm up: the first batch loads the CAS script (NOSCRIPT, then
			// EVAL) and a Cluster client learns the slots.
			if _, err := s.Apply(ctx, evs[:200]); err != nil {
				t.Fatal(err)
			}
			// What the batch must send: every entity read once, and
			// written once unless it is only read (a counterparty paying in).
			read, written := map[string]bool{}, map[string]bool{}
			for _, e := range evs[200:1200] {
				if e.Kind == event.KindAccountEvent {
					read["c"+e.CustomerExternalID], written["c"+e.CustomerExternalID] = true, true
					continue
				}
				read["a"+e.AccountExternalID], written["a"+e.AccountExternalID] = true, true
				read["c"+e.CustomerExternalID], written["c"+e.CustomerExternalID] = true, true
				if e.Counterparty != nil {
					read["p"+e.Counterparty.Fingerprint] = true
					if e.Direction == event.DirectionOut {
						written["p"+e.Counterparty.Fingerprint] = true
					}
				}
			}
			cnt.reset()
			if _, err := s.Apply(ctx, evs[200:1200]); err != nil {
				t.Fatal(err)
			}
			want := int64(2)
			if _, ok := c.(*redis.ClusterClient); ok {
				want = 6 // two per master: hundreds of entities reach all three
			}
			if p := cnt.pipelines.Load(); p != want {
				t.Errorf("%d pipelines for one batch, want %d", p, want)
			}
			if n := cnt.single.Load(); n != 0 {
				t.Errorf("%d commands outside the pipelines", n)
			}
			// A single Redis writes perCall entities per script call, a
			// Cluster one (keys of different slots).
			calls := len(written)
			if _, ok := c.(*redis.ClusterClient); !ok {
				calls = (len(written) + perCall - 1) / perCall
			}
			if n, w := cnt.piped.Load(), int64(len(read)+calls); n != w {
				t.Errorf("%d commands piped, want %d (%d reads, %d writes in %d calls)", n, w, len(read), len(written), calls)
			}
		})
	}
}

// With the cache, a batch reads only the entities this Store has not
// written or read before, and those it only reads (a counterparty paying
// in); every feature equals that of a Store without a cache.
func TestCacheSkipsReads(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, cnt := open(t, tg)
			s := New(c, Options{KeyPrefix: prefix})
			ref := New(c, Options{KeyPrefix: prefix + "ref:", CacheBytes: -1})
			ctx := context.Background()
			evs := realistic(1200, 300, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), 9)
			known := map[string]bool{}
			for off := 0; off < len(evs); off += 200 {
				batch := evs[off : off+200]
				// Per entity of the batch: is it written (some event counts
				// on it)?
				written := map[string]bool{}
				for _, e := range batch {
					if e.Kind == event.KindAccountEvent {
						written["c"+e.CustomerExternalID] = true
						continue
					}
					written["a"+e.AccountExternalID], written["c"+e.CustomerExternalID] = true, true
					if e.Counterparty != nil {
						k := "p" + e.Counterparty.Fingerprint
						written[k] = written[k] || e.Direction == event.DirectionOut
					}
				}
				reads, writes := 0, 0
				for k, w := range written {
					if !known[k] || !w {
						reads++
					}
					if w {
						writes++
					}
				}
				calls := writes
				if _, ok := c.(*redis.ClusterClient); !ok {
					calls = (writes + perCall - 1) / perCall
				}
				cnt.reset()
				got, err := s.Apply(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				if off > 0 {
					// (The first batch also loads the script.)
					if n := cnt.piped.Load(); n != int64(reads+calls) {
						t.Errorf("batch at %d: %d commands piped, want %d reads and %d write calls", off, n, reads, calls)
					}
				}
				want, err := ref.Apply(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("batch at %d: features differ from a Store without a cache", off)
				}
				for k, w := range written {
					// (A counterparty only ever read has no key to cache.)
					known[k] = known[k] || w
				}
			}
			if hits, reads := s.CacheStats(); hits == 0 || reads == 0 {
				t.Errorf("cache hits %d, reads %d: want both", hits, reads)
			}
		})
	}
}

func TestScriptReloadAfterFlush(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix})
	ctx := context.Background()
	at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	if _, err := s.Apply(ctx, []*event.Envelope{txn("a", "acc", "", "", "1", "EUR", event.DirectionIn, at)}); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Apply(ctx, []*event.Envelope{
		txn("b", "acc", "", "", "2", "EUR", event.DirectionIn, at.Add(time.Second)),
		txn("c", "acc", "", "", "3", "EUR", event.DirectionIn, at.Add(2*time.Second)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if a := got[1]["account"].(map[string]any); a["in_count_1h"] != int64(3) || a["in_sum_1h"] != json.Number("6.0000") {
		t.Fatalf("after SCRIPT FLUSH: %v", a)
	}
}

// Sums beyond 2^53 units leave Lua's exact range: they go through HINCRBY on
// strings and must stay exact to the last 0.0001.
func TestHugeSumsStayExact(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			s := New(c, Options{KeyPrefix: prefix})
			ctx := context.Background()
			at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
			var evs []*event.Envelope
			for i := range 12 {
				evs = append(evs, txn(fmt.Sprint("h", i), "acc", "", "", "99999999999.9999", "IDR", event.DirectionOut, at.Add(time.Duration(i)*time.Second)))
			}
			evs = append(evs, txn("small", "acc", "", "", "0.0001", "IDR", event.DirectionOut, at.Add(time.Minute)))
			got, err := s.Apply(ctx, evs)
			if err != nil {
				t.Fatal(err)
			}
			want := json.Number("1199999999999.9989") // 12 * 99999999999.9999 + 0.0001
			if a := got[12]["account"].(map[string]any); a["out_sum_1h"] != want || a["out_sum_30d"] != want || a["out_count_24h"] != int64(13) {
				t.Fatalf("huge sums: %v", a)
			}
		})
	}
}

// A value written as a base and appended delta records has the lengths the
// writer's cache notes, decodes to the state the cache holds (computed on in
// place, batch after batch) and to the writer's state (delta.go),
// replays and account events included, and busy entities do get records
// appended.
func TestDeltaRecordsDecodeToTheWritersState(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			s := New(c, Options{KeyPrefix: prefix})
			// The reference writes every value whole: its writer's state.
			ref := New(c, Options{KeyPrefix: prefix + "ref:"})
			ref.wholeValues = true
			clock := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
			s.now, ref.now = func() time.Time { return clock }, func() time.Time { return clock }
			ctx := context.Background()
			evs := realistic(3000, 40, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), 11)
			for off := 0; off < len(evs); off += 150 {
				batch := evs[off : off+150]
				if off >= 300 {
					// Replays of the previous batch's first events ride along.
					batch = append(append([]*event.Envelope(nil), evs[off-20:off]...), batch...)
				}
				for _, st := range []*Store{s, ref} {
					if _, err := st.Apply(ctx, batch); err != nil {
						t.Fatal(err)
					}
				}
				clock = clock.Add(7 * time.Minute) // the replay memory expires too
			}
			appended := 0
			for _, x := range s.cache.m {
				k := x.key
				v, err := c.Get(ctx, k).Result()
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				st, base, err := decodeBase(v)
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				if len(v) != x.vlen || base != x.blen {
					t.Fatalf("%s: %d bytes with a %d-byte base, the cache says %d and %d", k, len(v), base, x.vlen, x.blen)
				}
				if base < len(v) {
					appended++
				}
				if x.val != nil {
					if g, _ := genAt(string(x.val)); g != x.gen {
						t.Fatalf("%s: the cached value's generation is not Redis'", k)
					}
				}
				if got, want := encode(nil, 1, st), encode(nil, 1, x.state(t)); string(got) != string(want) {
					t.Fatalf("%s: the value decodes to another state than the cached one", k)
				}
				rv, err := c.Get(ctx, strings.Replace(k, prefix, prefix+"ref:", 1)).Result()
				if err != nil {
					t.Fatalf("%s (reference): %v", k, err)
				}
				rst, rbase, err := decodeBase(rv)
				if err != nil || rbase != len(rv) {
					t.Fatalf("%s (reference): %v, base %d of %d bytes", k, err, rbase, len(rv))
				}
				if got, want := encode(nil, 1, st), encode(nil, 1, rst); string(got) != string(want) {
					t.Fatalf("%s: base and delta records decode to another state than the writer's", k)
				}
			}
			if appended == 0 {
				t.Fatal("no value has delta records")
			}
			t.Logf("%d of %d values with delta records", appended, len(s.cache.m))
		})
	}
}

// An append leaves the key's TTL alone when this process set it less than
// keyTTLRefresh ago, and sets it again after that: the key never lives
// shorter than the longest window.
func TestAppendRefreshesTheTTLHourly(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix})
	clock := time.Now().UTC()
	s.now = func() time.Time { return clock }
	ctx := context.Background()
	key := s.key(entityAccount, event.AccountID(testWorkspace, "acc-ttl"))
	n := 0
	apply := func() {
		t.Helper()
		for range 3 {
			n++
			e := txn(fmt.Sprintf("ttl-%d", n), "acc-ttl", "", "", "1.00", "EUR", event.DirectionOut, clock.Truncate(time.Second))
			if _, err := s.Apply(ctx, []*event.Envelope{e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A base large enough that one event's record is appended to it.
	var first []*event.Envelope
	for i := range 50 {
		first = append(first, txn(fmt.Sprintf("ttl-base-%d", i), "acc-ttl", "", fmt.Sprintf("fp-%d", i), "1.00", "EUR", event.DirectionOut, clock.Truncate(time.Second)))
	}
	if _, err := s.Apply(ctx, first); err != nil {
		t.Fatal(err)
	}
	apply()
	if err := c.Expire(ctx, key, 100*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Minute)
	apply()
	if ttl := c.TTL(ctx, key).Val(); ttl > 100*time.Second {
		t.Fatalf("an append within the hour set the TTL again (%v)", ttl)
	}
	clock = clock.Add(keyTTLRefresh)
	apply()
	if ttl := c.TTL(ctx, key).Val(); ttl < keyTTL-time.Hour {
		t.Fatalf("an append an hour later left the TTL at %v", ttl)
	}
}
