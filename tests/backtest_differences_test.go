package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/backtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// The backtest's documented differences from what the stream stored
// (docs/rules.md, "Exact, and where it cannot be") that come from the
// stream's processes, each in a workspace of its own, fixed so that the
// Kafka partitions of its accounts are known.
var (
	diffWsPartitions = event.UUID{0xb7, 0x01, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x01}
	diffWsNoCustomer = event.UUID{0xb7, 0x02, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x02}
	diffWsVersions   = event.UUID{0xb7, 0x03, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x03}
)

// The rules of each workspace (and of the file the backtest is given).
const (
	diffRulesPartitions = `rules:
  - name: customer_second_out_1h
    severity: high
    expression: event.direction == "out" && features.customer.out_count_1h >= 2
  - name: payee_second_payment_24h
    severity: high
    expression: event.direction == "out" && features.counterparty.paid_count_24h >= 2
  - name: payment_after_sim_swap
    severity: high
    expression: features.customer.seconds_since_sim_swap >= 0
`
	diffRulesNoCustomer = `rules:
  - name: customer_second_out_1h
    severity: high
    expression: event.direction == "out" && features.customer.out_count_1h >= 2
`
	diffRulesV1 = `rules:
  - name: large_payment
    severity: high
    expression: event.direction == "out" && event.amount >= 100
`
	// Version 2: a lower threshold, in shadow mode.
	diffRulesV2 = `rules:
  - name: large_payment
    severity: high
    mode: shadow
    expression: event.direction == "out" && event.amount >= 50
`
)

// TestBacktestDifferencesFromTheStream runs the real stream, stream-events
// and persisters on hand-made events in three phases, and backtests each
// workspace over the period: where the stream applied events in another
// order than they were accepted, saw a transaction's customer differently,
// or ran an older version of a rule, the backtest's hits differ from the
// stored ones exactly as docs/rules.md says (one subtest a difference).
//
//   - Phase 1 (stream and persist): the events whose stream order differs
//     from their acceptance (a partition of the transactions topic ahead of
//     another, the transactions ahead of the account events), each account's
//     first transaction, and the events before the rule change.
//   - The rule changes with `rules apply` (the stream restarted, so that the
//     change is in force for everything after it).
//   - Phase 2: the events accepted before phase 1's but applied after them,
//     the transactions without customer_external_id, and the events after the
//     rule change.
//   - Phase 3 (stream-events and persist-events): an account event accepted
//     before a transaction of phase 1.
func TestBacktestDifferencesFromTheStream(t *testing.T) {
	t.Parallel()
	testenv.Binary(t)
	s := newProofStack(t, "backtest-differences", testenv.RedisURL(t))
	s.own(nil, []string{s.group + "-persist", s.group + "-persist-events"})
	for i, ws := range []event.UUID{diffWsPartitions, diffWsNoCustomer, diffWsVersions} {
		if _, err := s.super.Exec(t.Context(), `INSERT INTO speculapro.workspaces (id, name) VALUES ($1, $2)`, ws,
			fmt.Sprintf("backtest differences %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[event.UUID]string{}
	for ws, text := range map[event.UUID]string{diffWsPartitions: diffRulesPartitions, diffWsNoCustomer: diffRulesNoCustomer, diffWsVersions: diffRulesV1} {
		files[ws] = applyRuleText(t, s, ws, text)
	}
	d := newDiffEvents(time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second))
	p := diffWsPartitions
	d.txn("A", p, "acc-a1", "cust-a", "payee-a1", "10", 1) // accepted before B, applied after it
	d.txn("B", p, "acc-a2", "cust-a", "payee-a2", "10", 0) // same customer, other partition; occurred first, accepted late
	d.accepted("B", d.envs["A"].ReceivedAt.Add(time.Second))
	d.txn("C", p, "acc-c3", "cust-c3", "payee-c", "10", 2) // applied after D
	d.txn("D", p, "acc-c4", "cust-c4", "payee-c", "10", 3) // same payee, other partition
	d.accountEvent("E", p, "cust-e", "sim_swap", 4)        // applied after T
	d.txn("T", p, "acc-e5", "cust-e", "payee-e5", "10", 5) // the customer's transaction after its SIM swap
	n := diffWsNoCustomer
	d.txn("X1", n, "acc-x6", "cust-x", "payee-x", "10", 0) // acc-x6 stored as cust-x's
	d.txn("X2", n, "acc-x6", "", "payee-x", "10", 1)       // no customer_external_id
	d.txn("X3", n, "acc-x6", "cust-x", "payee-x", "10", 2) // cust-x again
	d.txn("X4", n, "acc-x7", "", "payee-x", "10", 3)       // no customer, account never stored
	d.txn("X5", n, "acc-x7", "", "payee-x", "10", 4)       // again
	v := diffWsVersions
	d.txn("Y1", v, "acc-y", "cust-y", "payee-y", "150", 0) // v1 fires
	d.txn("Y2", v, "acc-y", "cust-y", "payee-y", "60", 1)  // v1 does not, v2 would
	d.txn("Y3", v, "acc-y", "cust-y", "payee-y", "70", 2)  // v2 (shadow) fires
	d.txn("Y4", v, "acc-y", "cust-y", "payee-y", "30", 3)  // neither

	phase1 := d.produce(t, s, "B", "D", "T", "X1", "Y1", "Y2")
	stream := s.startStream(t, "stream", streamPipeline, nil)
	persist := s.startStream(t, "persist", "pipelines/persist.yaml", nil)
	s.waitDrained(t, stream, s.group, s.prefix+"txn.ingested", phase1, drainBound(phase1))
	s.waitDrained(t, persist, s.group+"-persist", s.prefix+"txn.ingested", phase1, drainBound(phase1))
	stopAll(t, stream)
	files[diffWsVersions] = applyRuleText(t, s, diffWsVersions, diffRulesV2)
	stream = s.startStream(t, "stream-after-apply", streamPipeline, nil)
	all := phase1 + d.produce(t, s, "A", "C", "X2", "X3", "X4", "X5", "Y3", "Y4")
	s.waitDrained(t, stream, s.group, s.prefix+"txn.ingested", all, drainBound(all))
	s.waitDrained(t, persist, s.group+"-persist", s.prefix+"txn.ingested", all, drainBound(all))
	scrape, err := stream.scrape()
	if err != nil {
		t.Fatal(err)
	}
	noCustomerErrors := metricSum(scrape, "speculapro_stream_rule_errors_total", `rule="customer_second_out_1h"`)
	events := d.produce(t, s, "E")
	evStream := s.startStream(t, "stream-events", streamEvtPipeline, nil)
	evPersist := s.startStream(t, "persist-events", "pipelines/persist-events.yaml", nil)
	s.waitDrained(t, evStream, s.group+"-events", s.prefix+"account.events", events, drainBound(events))
	s.waitDrained(t, evPersist, s.group+"-persist-events", s.prefix+"account.events", events, drainBound(events))
	stopAll(t, stream, persist, evStream, evPersist)
	if n := persistCountAny(t, s, "SELECT count(*) FROM speculapro.transactions"); n != all {
		t.Fatalf("%d transactions stored, want %d", n, all)
	}

	from, to := d.base.Add(-time.Hour), d.base.Add(time.Hour)
	backtestOf := func(t *testing.T, ws event.UUID) (*backtest.Report, []string) {
		rep, hits := runBacktest(t, s, files[ws], ws, from, to)
		got := d.names(hits[backtest.SourceWorkspace])
		if fromFile := d.names(hits[backtest.SourceFile]); !slices.Equal(fromFile, got) {
			t.Fatalf("the file's rules hit %v, the workspace's %v", fromFile, got)
		}
		return rep, got
	}

	// A customer with two accounts, a payee of two accounts, and a
	// customer's transactions against its account events are fed from
	// several partitions (two topics for the last). The stream applied B
	// before A, D before C and T before E, each the reverse of their
	// acceptance; the replay follows received_at (not occurred_at: B, a
	// minute late, occurred before A), so the customer's and the payee's
	// second payment is the other event, and the SIM swap's hit is found only
	// by the replay.
	t.Run("entities_fed_from_several_partitions", func(t *testing.T) {
		if d.partition["A"] == d.partition["B"] || d.partition["C"] == d.partition["D"] {
			t.Fatalf("accounts meant for different partitions share one: %v", d.partition)
		}
		stored := d.stored(t, s, diffWsPartitions)
		want := []string{"customer_second_out_1h v1 A", "payee_second_payment_24h v1 C"}
		if !slices.Equal(stored, want) {
			t.Fatalf("the stream stored %v, want %v", stored, want)
		}
		rep, got := backtestOf(t, diffWsPartitions)
		want = []string{"customer_second_out_1h B", "payee_second_payment_24h D", "payment_after_sim_swap T"}
		if !slices.Equal(got, want) {
			t.Fatalf("the backtest hit %v, want %v", got, want)
		}
		checkDiffFigures(t, rep, map[string][3]int64{"customer_second_out_1h": {1, 1, 0},
			"payee_second_payment_24h": {1, 1, 0}, "payment_after_sim_swap": {1, 0, 0}})
	})

	// A transaction without customer_external_id is stored with its
	// account's customer (X2: cust-x). The stream counted it on no customer
	// (the customer rule failed on it, as on X4 and X5), so X3 was cust-x's
	// second payment of the hour; the replay counts X2 on cust-x and fires on
	// X2 and X3. X4 and X5, whose account was not stored yet, are stored with
	// a placeholder customer named after it, which the replay takes for none,
	// as the stream did: the rule fails on both there too.
	t.Run("transaction_without_customer", func(t *testing.T) {
		if noCustomerErrors != 3 {
			t.Fatalf("the stream's customer rule failed on %v events, want 3 (X2, X4, X5: no customer)", noCustomerErrors)
		}
		for ext, want := range map[string]string{"X2": "cust-x", "X4": "account:acc-x7", "X5": "account:acc-x7"} {
			var cust string
			if err := s.super.QueryRow(t.Context(), `SELECT c.external_id FROM speculapro.transactions t
  JOIN speculapro.customers c ON c.id = t.customer_id WHERE t.id = $1`, d.ids[ext]).Scan(&cust); err != nil || cust != want {
				t.Fatalf("%s is stored with customer %q (%v), want %q", ext, cust, err, want)
			}
		}
		stored := d.stored(t, s, diffWsNoCustomer)
		if want := []string{"customer_second_out_1h v1 X3"}; !slices.Equal(stored, want) {
			t.Fatalf("the stream stored %v, want %v", stored, want)
		}
		rep, got := backtestOf(t, diffWsNoCustomer)
		if want := []string{"customer_second_out_1h X2", "customer_second_out_1h X3"}; !slices.Equal(got, want) {
			t.Fatalf("the backtest hit %v, want %v", got, want)
		}
		checkDiffFigures(t, rep, map[string][3]int64{"customer_second_out_1h": {2, 1, 2}})
	})

	// A rule changed by `rules apply` during the period (v1 live, then v2
	// in shadow mode with a lower threshold): the stream evaluated Y1 and Y2
	// with v1 and Y3 and Y4 with v2; the replay evaluates v2 on all four, so
	// it fires on Y2 too, and STORED counts both versions' hits, live and
	// shadow.
	t.Run("rule_changed_during_the_period", func(t *testing.T) {
		stored := d.stored(t, s, diffWsVersions)
		if want := []string{"large_payment v1 Y1", "large_payment v2 shadow Y3"}; !slices.Equal(stored, want) {
			t.Fatalf("the stream stored %v, want %v", stored, want)
		}
		rep, got := backtestOf(t, diffWsVersions)
		if want := []string{"large_payment Y1", "large_payment Y2", "large_payment Y3"}; !slices.Equal(got, want) {
			t.Fatalf("the backtest hit %v, want %v", got, want)
		}
		checkDiffFigures(t, rep, map[string][3]int64{"large_payment": {3, 2, 0}})
		if rr := workspaceResult(rep, "large_payment"); rr == nil || rr.Version != 2 || rr.Mode != rules.ModeShadow || rr.Alerts != 0 || rep.LiveAlerted != 1 {
			t.Fatalf("large_payment reported %+v with %d events alerted live; want v2, shadow, no alert, and v1's one alert", rr, rep.LiveAlerted)
		}
	})
}

// checkDiffFigures holds each workspace rule's HITS, STORED and ERRORS to
// want (rule → {hits, stored, errors}).
func checkDiffFigures(t *testing.T, rep *backtest.Report, want map[string][3]int64) {
	t.Helper()
	for name, w := range want {
		rr := workspaceResult(rep, name)
		if rr == nil || rr.Hits != w[0] || rr.Stored != w[1] || rr.Errors != w[2] {
			t.Errorf("workspace rule %s reported %+v, want %d hits, %d stored, %d errors", name, rr, w[0], w[1], w[2])
		}
	}
}

// workspaceResult is the report's row of workspace rule name.
func workspaceResult(rep *backtest.Report, name string) *backtest.RuleResult {
	for _, rr := range rep.Rules {
		if rr.Source == backtest.SourceWorkspace && rr.Name == name {
			return rr
		}
	}
	return nil
}

// applyRuleText writes text as a rule file and applies it to ws with
// `rules apply`, as the workspace's app role; it returns the file.
func applyRuleText(t *testing.T, s *proofStack, ws event.UUID, text string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runBin(t, map[string]string{"SP_DB_URL": s.db.AppURL}, "rules", "apply", file, "--workspace", ws.String()); code != 0 {
		t.Fatalf("rules apply: exit %d\n%s%s", code, out, errOut)
	}
	return file
}

// diffEvents are the test's events by name: transaction or account event,
// each accepted (received_at) a second after it occurred, the n-th of its
// workspace n minutes after base.
type diffEvents struct {
	base      time.Time
	envs      map[string]event.Envelope
	ids       map[string]event.UUID
	byID      map[event.UUID]string
	partition map[string]int32 // where produce put it
}

func newDiffEvents(base time.Time) *diffEvents {
	return &diffEvents{base: base, envs: map[string]event.Envelope{}, ids: map[string]event.UUID{},
		byID: map[event.UUID]string{}, partition: map[string]int32{}}
}

func (d *diffEvents) add(name string, e event.Envelope) {
	d.envs[name], d.ids[name], d.byID[e.ID] = e, e.ID, name
}

// accepted sets when the named event was accepted (its received_at).
func (d *diffEvents) accepted(name string, at time.Time) {
	e := d.envs[name]
	e.ReceivedAt = at
	d.envs[name] = e
}

// txn is a payment out of acct (of cust, "" for none) to payee.
func (d *diffEvents) txn(name string, ws event.UUID, acct, cust, payee, amount string, minute int) {
	at := d.base.Add(time.Duration(minute) * time.Minute)
	fp := sha256.Sum256([]byte(payee))
	ext := "bd-" + name
	d.add(name, event.Envelope{V: event.Version, Kind: event.KindTransaction, ID: event.TransactionID(ws, ext, at),
		WorkspaceID: ws, ExternalID: ext, OccurredAt: at, ReceivedAt: at.Add(time.Second), CustomerExternalID: cust,
		AccountExternalID: acct, Amount: amount, Currency: "EUR", Direction: event.DirectionOut, Status: "completed",
		Type: "transfer", Counterparty: &event.Counterparty{Name: payee, Fingerprint: hex.EncodeToString(fp[:])}})
}

// accountEvent is an account event of type typ for cust.
func (d *diffEvents) accountEvent(name string, ws event.UUID, cust, typ string, minute int) {
	at := d.base.Add(time.Duration(minute) * time.Minute)
	ext := "bd-" + name
	d.add(name, event.Envelope{V: event.Version, Kind: event.KindAccountEvent, ID: event.AccountEventID(ws, ext, at),
		WorkspaceID: ws, ExternalID: ext, OccurredAt: at, ReceivedAt: at.Add(time.Second), CustomerExternalID: cust, Type: typ})
}

// produce sends the named events, in that order, to their topic with the
// ingest API's keys (an account's transactions, a customer's account
// events share a partition), and returns how many it sent.
func (d *diffEvents) produce(t *testing.T, s *proofStack, names ...string) int {
	t.Helper()
	var recs []*kgo.Record
	for _, name := range names {
		e := d.envs[name]
		value, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		topic, key := s.prefix+"txn.ingested", loadgen.Key(e)
		if e.Kind == event.KindAccountEvent {
			topic, key = s.prefix+"account.events", loadgen.EventKey(e)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: value})
	}
	s.produce(t, recs...)
	for i, name := range names {
		d.partition[name] = recs[i].Partition
	}
	return len(recs)
}

// names are hits as "<rule> <event name>", sorted.
func (d *diffEvents) names(hits map[proofHit]bool) []string {
	var out []string
	for h := range hits {
		out = append(out, h.rule+" "+d.byID[h.event])
	}
	slices.Sort(out)
	return out
}

// stored are ws's stored rule hits as "<rule> v<version> [shadow] <event
// name>", sorted.
func (d *diffEvents) stored(t *testing.T, s *proofStack, ws event.UUID) []string {
	t.Helper()
	rows, err := s.super.Query(t.Context(), `SELECT r.name, h.rule_version, h.shadow, h.event_id
  FROM speculapro.rule_hits h JOIN speculapro.rules r ON r.id = h.rule_id WHERE h.workspace_id = $1`, ws)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		var version int
		var shadow bool
		var id event.UUID
		if err := rows.Scan(&name, &version, &shadow, &id); err != nil {
			t.Fatal(err)
		}
		mode := ""
		if shadow {
			mode = " shadow"
		}
		out = append(out, fmt.Sprintf("%s v%d%s %s", name, version, mode, d.byID[id]))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
