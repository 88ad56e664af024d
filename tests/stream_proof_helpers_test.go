package tests

import (
	"context"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/features"
	"github.com/speculapro/speculapro/internal/kafkaconf"
	"github.com/speculapro/speculapro/internal/redisconn"
)

// The stream proof tests (exactness, replay, crash, cluster, bad input, the
// benchmark) run the real binary on the stream pipelines against the real
// Kafka, PostgreSQL and Redis, each test with its own topic prefix, consumer
// group, database and Redis key prefix, so they never see one another.

const (
	proofPartitions   = 6
	streamPipeline    = "pipelines/stream.yaml"
	streamEvtPipeline = "pipelines/stream-events.yaml"
)

// proofStack is one stream test's topics, groups, database and Redis keys.
type proofStack struct {
	*testKafka
	prefix    string // topic prefix
	group     string // SP_STREAM_GROUP; the events pipeline's group adds -events
	db        *dbtest.DB
	super     *pgx.Conn
	redisURL  string
	keyPrefix string // SP_REDIS_KEY_PREFIX
	redis     redis.UniversalClient
	store     *features.Store
	replayTTL string
}

// newProofStack makes the stack; redisURL is a single Redis or a Cluster.
// Cleanup deletes the topics, the groups and every Redis key of the prefix.
func newProofStack(t testing.TB, name, redisURL string) *proofStack {
	t.Helper()
	unique := uniqueName(t, name)
	s := &proofStack{
		testKafka: newTestKafka(t), prefix: unique + ".", group: unique + "-stream", db: dbtest.New(t),
		redisURL: redisURL, keyPrefix: unique + ":", replayTTL: "30m",
	}
	s.super = s.db.Connect(t, s.db.SuperuserURL)
	s.createAll(t, s.prefix, proofPartitions)
	s.own(nil, []string{s.group, s.group + "-events"})
	cl, err := redisconn.Open(redisURL)
	if err != nil {
		t.Fatalf("opening Redis %s: %v", redisURL, err)
	}
	s.redis = cl
	s.store = features.New(cl, features.Options{KeyPrefix: s.keyPrefix})
	t.Cleanup(func() {
		n := s.deleteKeys(t)
		if n > 0 {
			t.Logf("deleted %d Redis keys under %s", n, s.keyPrefix)
		}
		cl.Close()
	})
	return s
}

// env is a stream process's environment on this stack.
func (s *proofStack) env(extra map[string]string) map[string]string {
	env := map[string]string{
		"SP_KAFKA_BROKERS":      strings.Join(s.brokers, ","),
		"SP_KAFKA_TOPIC_PREFIX": s.prefix,
		"SP_STREAM_GROUP":       s.group,
		"SP_PERSIST_GROUP":      s.group + "-persist",
		"SP_DB_SYSTEM_URL":      s.db.SystemURL,
		"SP_REDIS_URL":          s.redisURL,
		"SP_REDIS_KEY_PREFIX":   s.keyPrefix,
		"SP_STREAM_REPLAY_TTL":  s.replayTTL,
	}
	maps.Copy(env, extra)
	return env
}

// eachKey calls fn for every key of the prefix, on every master of a
// Cluster.
func (s *proofStack) eachKey(t testing.TB, fn func(c redis.Cmdable, key string)) {
	t.Helper()
	ctx := context.Background()
	scan := func(c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, s.keyPrefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			fn(c, iter.Val())
		}
		return iter.Err()
	}
	var err error
	if cc, ok := s.redis.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(c) })
	} else {
		err = scan(s.redis)
	}
	if err != nil {
		t.Errorf("scanning Redis keys %s*: %v", s.keyPrefix, err)
	}
}

func (s *proofStack) deleteKeys(t testing.TB) int {
	n := 0
	s.eachKey(t, func(c redis.Cmdable, key string) {
		if err := c.Del(context.Background(), key).Err(); err == nil {
			n++
		}
	})
	return n
}

// memoryOfKeys is the bytes Redis says the prefix's keys take (MEMORY
// USAGE, all samples) and how many keys there are.
func (s *proofStack) memoryOfKeys(t testing.TB) (bytes, keys int64) {
	s.eachKey(t, func(c redis.Cmdable, key string) {
		n, err := c.MemoryUsage(context.Background(), key, 0).Result()
		if err == nil {
			bytes += n
			keys++
		}
	})
	return bytes, keys
}

// startStream runs one stream pipeline on the stack, output in a file.
func (s *proofStack) startStream(t testing.TB, name, pipeline string, extra map[string]string, args ...string) *binProcess {
	t.Helper()
	p := newBinProcess(t).named(name).toFile(filepath.Join(t.TempDir(), name+".log"))
	all := append([]string{"run", "--set", "http.address=" + p.httpAddr}, args...)
	return p.start(t, s.env(extra), append(all, pipeline)...)
}

// lagOf is how many records of topic group has not committed (a
// partition without a commit counts from its start), and how many records
// topic holds. A partition whose end cannot be listed fails the call
// rather than counting as caught up.
func (s *proofStack) lagOf(t testing.TB, group, topic string) (lag, written int64, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ends, err := s.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	committed := s.committed(t, group)[topic]
	ends.Each(func(o kadm.ListedOffset) {
		written += o.Offset
		lag += max(o.Offset-max(committed[o.Partition], 0), 0)
	})
	return lag, written, nil
}

// waitDrained waits until group has committed all of topic, which holds at
// least want records, while p keeps running.
func (s *proofStack) waitDrained(t testing.TB, p *binProcess, group, topic string, want int, within time.Duration) {
	t.Helper()
	var lag, written int64
	var err error
	if !poll(within, 250*time.Millisecond, func() bool {
		if p != nil && !p.running() {
			t.Fatalf("%s exited (code %d) before draining %s:\n%s", p.name, p.cmd.ProcessState.ExitCode(), topic, p.tail(4000))
		}
		lag, written, err = s.lagOf(t, group, topic)
		return err == nil && written >= int64(want) && lag == 0
	}) {
		t.Fatalf("after %s group %s still has %d of %d records of %s to go (want %d written; %v)", within, group, lag, written, topic, want, err)
	}
}

// produceLG sends records from..to of g's transactions or account events
// in-process, as fast as Kafka takes them (rate 0) or at rate per second.
func (s *proofStack) produceLG(t testing.TB, g *loadgen.Generator, kind event.Kind, from, to int, rate float64) loadgen.Summary {
	t.Helper()
	sum, err := s.produceLGErr(g, kind, from, to, rate)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// applyAccountEvents sends the run's first n account events and drains
// them through a stream-events process (extra: its added environment), so
// the rules over account events can be predicted before the transactions
// flow; the process is returned still running.
func (s *proofStack) applyAccountEvents(t testing.TB, r *proofRun, n int, extra map[string]string) *binProcess {
	t.Helper()
	s.produceLG(t, r.g, event.KindAccountEvent, 0, n, 0)
	p := s.startStream(t, "stream-events", streamEvtPipeline, extra)
	s.waitDrained(t, p, s.group+"-events", s.prefix+"account.events", n, drainBound(n))
	return p
}

// produceInBackground sends the run's first n transactions at rate per
// second from a goroutine of its own; the function it returns waits for the
// last one and fails the test if sending failed.
func (s *proofStack) produceInBackground(r *proofRun, n int, rate float64) (wait func(t testing.TB)) {
	done := make(chan error, 1)
	go func() {
		_, err := s.produceLGErr(r.g, event.KindTransaction, 0, n, rate)
		done <- err
	}()
	return func(t testing.TB) {
		t.Helper()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// produceLGErr is produceLG for a goroutine other than the test's.
func (s *proofStack) produceLGErr(g *loadgen.Generator, kind event.Kind, from, to int, rate float64) (loadgen.Summary, error) {
	opts, err := loadgen.ProducerOpts(kafkaconf.Config{SeedBrokers: s.brokers}, 10*time.Millisecond)
	if err != nil {
		return loadgen.Summary{}, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return loadgen.Summary{}, err
	}
	defer cl.Close()
	topic := s.prefix + "txn.ingested"
	if kind == event.KindAccountEvent {
		topic = s.prefix + "account.events"
	}
	sum, err := loadgen.Produce(context.Background(), cl, g, loadgen.ProduceOptions{Topic: topic, Kind: kind, From: from, To: to, Rate: rate})
	if err != nil {
		return sum, fmt.Errorf("producing to %s: %w", topic, err)
	}
	return sum, nil
}

// insertRules writes proofRules (plus extra) to every workspace and
// returns the rule names by ID.
func (s *proofStack) insertRules(t testing.TB, workspaces []event.UUID, extra ...proofRule) map[event.UUID]string {
	t.Helper()
	names := map[event.UUID]string{}
	for _, ws := range workspaces {
		for _, r := range append(append([]proofRule(nil), proofRules...), extra...) {
			var id event.UUID
			if err := s.super.QueryRow(context.Background(), `
INSERT INTO speculapro.rules (workspace_id, name, description, applies_to, expression, severity, action, alert, score)
VALUES ($1, $2, 'stream proof test', $3, $4, 'high', 'alert', $5, 10) RETURNING id`,
				ws, r.name, r.appliesTo, r.expr, r.alert).Scan(&id); err != nil {
				t.Fatalf("inserting rule %s: %v", r.name, err)
			}
			names[id] = r.name
		}
	}
	return names
}

// caseSettings gives the proofs' workspaces each case grouping (the first
// and fourth by customer, the second by account, the third a case per
// alert) and webhook endpoints the stream queues case steps for: one for
// every event type in the first workspace, one for the case types in the
// second.
func (s *proofStack) caseSettings(t testing.TB, workspaces []event.UUID) {
	t.Helper()
	for i, grouping := range []string{"customer", "account", "alert", "customer"}[:min(4, len(workspaces))] {
		if _, err := s.super.Exec(context.Background(),
			"UPDATE speculapro.workspaces SET case_grouping = $2 WHERE id = $1", workspaces[i], grouping); err != nil {
			t.Fatalf("setting case_grouping %s: %v", grouping, err)
		}
	}
	for i, types := range [][]string{{}, {"case.opened", "case.alert_attached"}}[:min(2, len(workspaces))] {
		if _, err := s.super.Exec(context.Background(), `
INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted, event_types)
VALUES ($1, 'https://example.test/hook', '\x00', $2)`, workspaces[i], types); err != nil {
			t.Fatalf("adding a webhook endpoint: %v", err)
		}
	}
}

// hitsInDB are the rule hits stored, by (rule name, event), with how many
// rows each has.
func (s *proofStack) hitsInDB(t testing.TB) map[proofHit]int {
	t.Helper()
	return s.pairs(t, `SELECT r.name, h.event_id FROM speculapro.rule_hits h JOIN speculapro.rules r ON r.id = h.rule_id`)
}

// alertsInDB are the alerts stored, by the (rule name, event) of their
// dedupe key, with how many rows each has.
func (s *proofStack) alertsInDB(t testing.TB) map[proofHit]int {
	t.Helper()
	return s.pairs(t, `SELECT r.name, a.event_id FROM speculapro.alerts a JOIN speculapro.rules r ON r.id = a.rule_id
WHERE a.dedupe_key = a.rule_id::text || ':' || a.event_id::text`)
}

func (s *proofStack) pairs(t testing.TB, query string) map[proofHit]int {
	t.Helper()
	rows, err := s.super.Query(context.Background(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	out := map[proofHit]int{}
	for rows.Next() {
		var h proofHit
		if err := rows.Scan(&h.rule, &h.event); err != nil {
			t.Fatal(err)
		}
		out[h]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// compareHits checks that got holds every predicted hit exactly once and
// nothing else, restricted to rules (all when empty), and says what differs.
func compareHits(what string, want map[proofHit]bool, got map[proofHit]int, rules map[string]bool) []string {
	var diffs []string
	for h := range want {
		if len(rules) > 0 && !rules[h.rule] {
			continue
		}
		switch n := got[h]; {
		case n == 0:
			diffs = append(diffs, fmt.Sprintf("%s: missing %s on %s", what, h.rule, h.event))
		case n > 1:
			diffs = append(diffs, fmt.Sprintf("%s: %s on %s %d times", what, h.rule, h.event, n))
		}
	}
	for h := range got {
		if (len(rules) == 0 || rules[h.rule]) && !want[h] {
			diffs = append(diffs, fmt.Sprintf("%s: %s fired on %s, not predicted", what, h.rule, h.event))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// countByRule sums pairs per rule, for logs.
func countByRule[V bool | int](m map[proofHit]V) map[string]int {
	out := map[string]int{}
	for h := range m {
		out[h.rule]++
	}
	return out
}

// proofRun is one generated run: the generator and every envelope sent.
type proofRun struct {
	g      *loadgen.Generator
	txns   []event.Envelope
	events []event.Envelope
	model  *streamModel
}

// newProofRun builds the generator and regenerates every envelope; the
// model holds them all once.
func newProofRun(t testing.TB, cfg loadgen.Config) *proofRun {
	t.Helper()
	g, err := loadgen.New(cfg, lgProtector(t))
	if err != nil {
		t.Fatal(err)
	}
	r := &proofRun{g: g, model: newStreamModel()}
	for i := range cfg.AccountEvents {
		r.events = append(r.events, g.AccountEvent(i))
	}
	for i := range cfg.Count {
		r.txns = append(r.txns, g.Envelope(i))
	}
	for _, e := range r.events {
		if err := r.model.apply(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range r.txns {
		if err := r.model.apply(e); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// compareTotals reads a sample of n accounts (those with transactions),
// their customers and the counterparties they dealt with through the
// read-only API and compares every total with the model (times scale, see
// diffTotals). It returns the differences and logs how much was compared.
func (s *proofStack) compareTotals(t testing.TB, r *proofRun, n int, seed uint64, scale int64) []string {
	t.Helper()
	ctx := context.Background()
	var accounts []modelKey
	for k, e := range r.model.entities {
		if k.kind == "account" && len(e.txns) > 0 {
			accounts = append(accounts, k)
		}
	}
	sort.Slice(accounts, func(i, j int) bool { return accounts[i].key < accounts[j].key })
	rnd := mrand.New(mrand.NewPCG(seed, 2))
	rnd.Shuffle(len(accounts), func(i, j int) { accounts[i], accounts[j] = accounts[j], accounts[i] })
	accounts = accounts[:min(n, len(accounts))]

	acctOf := map[string]loadgen.Account{}
	for _, a := range r.g.Accounts() {
		acctOf[a.ExternalID] = a
	}
	var diffs []string
	customers, counterparties := map[modelKey]bool{}, map[modelKey]bool{}
	compared := 0
	for _, k := range accounts {
		e := r.model.entities[k]
		for _, cur := range e.currencies() {
			got, err := s.store.ReadAccount(ctx, k.workspace, k.key, cur)
			if err != nil {
				t.Fatalf("reading account %s: %v", k.key, err)
			}
			diffs = append(diffs, diffTotals("account "+k.key+" "+cur, e.partyTotals(cur), got, scale)...)
			compared++
		}
		customers[modelKey{"customer", k.workspace, acctOf[k.key].CustomerExternalID}] = true
		for _, x := range e.txns {
			if x.cp != "" {
				counterparties[modelKey{"counterparty", k.workspace, x.cp}] = true
			}
		}
	}
	for k := range customers {
		e := r.model.lookup(k.kind, k.workspace, k.key)
		if e == nil {
			continue
		}
		for _, cur := range e.currencies() {
			got, err := s.store.ReadCustomer(ctx, k.workspace, k.key, cur)
			if err != nil {
				t.Fatalf("reading customer %s: %v", k.key, err)
			}
			want := e.partyTotals(cur)
			maps.Copy(want, e.eventTotals())
			diffs = append(diffs, diffTotals("customer "+k.key+" "+cur, want, got, scale)...)
			compared++
		}
	}
	for k := range counterparties {
		e := r.model.lookup(k.kind, k.workspace, k.key)
		if e == nil {
			continue // only ever paid the account: no totals
		}
		for _, cur := range e.currencies() {
			got, err := s.store.ReadCounterparty(ctx, k.workspace, k.key, cur)
			if err != nil {
				t.Fatalf("reading counterparty %s: %v", k.key, err)
			}
			diffs = append(diffs, diffTotals("counterparty "+k.key[:8]+" "+cur, e.counterpartyTotals(cur), got, scale)...)
			compared++
		}
	}
	t.Logf("compared %d reads (%d accounts, %d customers, %d counterparties) with the model: %d differences",
		compared, len(accounts), len(customers), len(counterparties), len(diffs))
	return diffs
}

// failDiffs fails the test with the first differences.
func failDiffs(t testing.TB, what string, diffs []string) {
	t.Helper()
	if len(diffs) == 0 {
		return
	}
	show := diffs[:min(len(diffs), 30)]
	if os.Getenv("SP_TEST_ALL_DIFFS") != "" {
		show = diffs
	}
	t.Fatalf("%s: %d differences, the first:\n  %s", what, len(diffs), strings.Join(show, "\n  "))
}

// stopAll ends processes with SIGTERM, expecting a clean exit.
func stopAll(t testing.TB, ps ...*binProcess) {
	t.Helper()
	for _, p := range ps {
		if p == nil || !p.running() {
			continue
		}
		// A process started a moment ago (a restart after a kill that
		// found nothing left to do) has no signal handler yet, and SIGTERM
		// would kill it outright: wait until it serves HTTP.
		poll(30*time.Second, 50*time.Millisecond, func() bool { _, err := p.scrape(); return err == nil })
		if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
			t.Errorf("%s exited with %d on SIGTERM:\n%s", p.name, code, p.tail(3000))
		}
	}
}

// proofConfig is the population of the stream tests: accounts over four
// workspaces, a 72 h span so every window matters.
func proofConfig(seed uint64, txns, events, accounts int) loadgen.Config {
	return loadgen.Config{
		Seed: seed, Count: txns, AccountEvents: events, Accounts: accounts, Workspaces: 4,
		Counterparties: max(400, accounts/2), KnownAccountsRatio: 0.3, LinkedRatio: loadgen.DefaultLinkedRatio,
		Start: time.Now().UTC().Truncate(time.Second), Spread: 72 * time.Hour,
	}
}
