package tests

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/backtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// backtestRate paces loadgen so that no two records share a microsecond of
// received_at, the order a backtest applies them in (internal/backtest
// "Order"): the ingest API's requests are at least that far apart.
const backtestRate = 20000

// TestRulesBacktestReproducesLiveHits: after the real stream and persister
// processed a loadgen run live (late events in it: up to an hour behind),
// `rules backtest` of the live rules over the same period reproduces the
// stored rule_hits exactly, rule by rule and event by event, for the live
// rules and for the same rules given as a file; and a period starting
// halfway, whose totals are warmed from the history before it, reproduces
// the hits of its events exactly too. One rule of the workspace is in
// shadow mode: its replay reproduces its stored shadow hits like a live
// rule's, and it is reported as shadow, with no alert.
func TestRulesBacktestReproducesLiveHits(t *testing.T) {
	t.Parallel()
	testenv.Binary(t)
	// A quarter of the stream exactness test's sizes.
	txns, events, accounts := exactSizes()
	txns, events, accounts = txns/4, events/4, accounts/4
	cfg := proofConfig(lgSeed(t), txns, events, accounts)
	s := newProofStack(t, "backtest", testenv.RedisURL(t))
	s.own(nil, []string{s.group + "-persist", s.group + "-persist-events"})
	r := newProofRun(t, cfg)
	x := newExactRun(t, s, r, shadowProofRule)
	if _, err := s.super.Exec(t.Context(), "UPDATE speculapro.rules SET mode = 'shadow' WHERE name = $1", shadowProofRule.name); err != nil {
		t.Fatal(err)
	}
	// The shadow rule fires where its live twin does (the same
	// expression), and raises no alert: checkHits holds the stored hits and
	// alerts to that.
	for h := range x.hits {
		if h.rule == shadowTwin {
			x.hits[proofHit{rule: shadowProofRule.name, event: h.event}] = true
		}
	}

	s.produceLG(t, r.g, event.KindAccountEvent, 0, events, backtestRate)
	evStream := s.startStream(t, "stream-events", streamEvtPipeline, nil)
	evPersist := s.startStream(t, "persist-events", "pipelines/persist-events.yaml", nil)
	s.waitDrained(t, evStream, s.group+"-events", s.prefix+"account.events", events, drainBound(events))
	s.waitDrained(t, evPersist, s.group+"-persist-events", s.prefix+"account.events", events, drainBound(events))
	s.produceLG(t, r.g, event.KindTransaction, 0, txns, backtestRate)
	txStream := s.startStream(t, "stream", streamPipeline, nil)
	txPersist := s.startStream(t, "persist", "pipelines/persist.yaml", nil)
	s.waitDrained(t, txStream, s.group, s.prefix+"txn.ingested", txns, drainBound(txns))
	s.waitDrained(t, txPersist, s.group+"-persist", s.prefix+"txn.ingested", txns, drainBound(txns))
	stopAll(t, evStream, evPersist, txStream, txPersist)
	x.checkHits(t, "live")
	if n := persistCountAny(t, s, "SELECT count(*) FROM speculapro.transactions"); n != txns {
		t.Fatalf("%d transactions stored, want %d", n, txns)
	}

	file := writeProofRuleFile(t)
	stored := s.hitsInDB(t)
	from := cfg.Start.Add(-cfg.Spread - 2*time.Hour)
	to := cfg.Start.Add(time.Hour)
	halfway := cfg.Start.Add(-cfg.Spread / 2)
	occurred := s.occurredOf(t)
	for _, ws := range r.g.Workspaces() {
		for _, start := range []time.Time{from, halfway} {
			rep, hits := runBacktest(t, s, file, ws, start, to)
			want := map[proofHit]int{}
			for h, n := range stored {
				if o, ok := occurred[h.event]; ok && o.ws == ws && !o.at.Before(start) {
					want[h] = n
				}
			}
			for _, src := range []string{backtest.SourceWorkspace, backtest.SourceFile} {
				got := map[proofHit]bool{}
				for h := range hits[src] {
					got[h] = true
				}
				failDiffs(t, fmt.Sprintf("workspace %s from %s, %s rules", ws, start.Format(time.RFC3339), src),
					compareHits("backtest hit", got, want, nil))
			}
			checkBacktestFigures(t, rep, want, start.Equal(from))
		}
	}
	// The table a person reads: every rule, file and live, its days and
	// the values behind a sample hit.
	ws := r.g.Workspaces()[0]
	out, errOut, code := runBin(t, map[string]string{"SP_DB_URL": s.db.AppURL}, "rules", "backtest", file,
		"--workspace", ws.String(), "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--explain", "1")
	if code != 0 {
		t.Fatalf("rules backtest exited %d:\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"SOURCE     RULE", "hits per day:", "features.account.out_count_1h="} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	for _, want := range [][]string{{"workspace", "t_velocity_out_1h", "v1", "live"}, {"file", "t_velocity_out_1h", "live"},
		{"workspace", shadowProofRule.name, "v1", "shadow"}, {"file", shadowProofRule.name, "shadow"}} {
		if !tableHasRow(out, want) {
			t.Errorf("the table lacks a row starting %q:\n%s", want, out)
		}
	}
	t.Logf("rules backtest %s --workspace %s --from %s --to %s --explain 1:\n%s%s", filepath.Base(file), ws,
		from.Format(time.RFC3339), to.Format(time.RFC3339), out, errOut)
}

// shadowProofRule is in shadow mode in the workspace and in the rule file:
// shadowTwin's expression, alerting, but a shadow rule raises no alert.
var shadowProofRule = proofRule{name: "t_large_to_new_payee_shadow", appliesTo: "transaction", alert: true,
	expr: `event.direction == "out" && event.amount >= 5000 && features.account.new_counterparty`}

const shadowTwin = "t_large_to_new_payee"

// tableHasRow reports whether a line of the table starts with the fields
// want.
func tableHasRow(table string, want []string) bool {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) >= len(want) && slices.Equal(f[:len(want)], want) {
			return true
		}
	}
	return false
}

// checkBacktestFigures: the report's counts agree with the hits: per
// workspace rule as many hits as the stream stored, every alert a live rule
// would raise an event the live rules alerted on (overlap), none new, and
// the shadow rule none.
func checkBacktestFigures(t *testing.T, rep *backtest.Report, want map[proofHit]int, whole bool) {
	t.Helper()
	per := countByRule(want)
	alerting := map[string]bool{}
	for _, r := range proofRules {
		alerting[r.name] = r.alert
	}
	for _, rr := range rep.Rules {
		if int(rr.Hits) != per[rr.Name] {
			t.Errorf("%s rule %s: %d hits reported, %d stored", rr.Source, rr.Name, rr.Hits, per[rr.Name])
		}
		if whole && rr.Source == backtest.SourceWorkspace && rr.Stored != rr.Hits {
			t.Errorf("workspace rule %s: %d stored hits reported, %d replayed", rr.Name, rr.Stored, rr.Hits)
		}
		if alerting[rr.Name] && (rr.Mode != rules.ModeLive || rr.Alerts != rr.Hits || rr.Overlap != rr.Hits || rr.New != 0) {
			t.Errorf("rule %s: mode %s, %d hits, %d alerts, %d overlapping, %d new", rr.Name, rr.Mode, rr.Hits, rr.Alerts, rr.Overlap, rr.New)
		}
		if rr.Name == shadowProofRule.name && (rr.Mode != rules.ModeShadow || rr.Hits != int64(per[shadowTwin]) || rr.Alerts != 0 || rr.Overlap != 0 || rr.New != 0) {
			t.Errorf("shadow rule %s: mode %s, %d hits (its twin %d), %d alerts, %d overlapping, %d new", rr.Name, rr.Mode,
				rr.Hits, per[shadowTwin], rr.Alerts, rr.Overlap, rr.New)
		}
		var days int64
		for _, d := range rr.PerDay {
			days += d.Hits
		}
		if days != rr.Hits || (rr.Hits > 0 && (rr.Accounts == 0 || rr.Customers == 0)) {
			t.Errorf("rule %s: %d hits, %d over the days, %d accounts, %d customers", rr.Name, rr.Hits, days, rr.Accounts, rr.Customers)
		}
	}
}

// runBacktest runs `rules backtest` on ws over [from, to) as the app role
// and returns its JSON report and its hits (--hits) by source.
func runBacktest(t *testing.T, s *proofStack, file string, ws event.UUID, from, to time.Time) (*backtest.Report, map[string]map[proofHit]bool) {
	t.Helper()
	hitsFile := filepath.Join(t.TempDir(), "hits.csv")
	out, errOut, code := runBin(t, map[string]string{"SP_DB_URL": s.db.AppURL}, "rules", "backtest", file,
		"--workspace", ws.String(), "--from", from.Format(time.RFC3339Nano), "--to", to.Format(time.RFC3339Nano),
		"--format", "json", "--explain", "2", "--hits", hitsFile)
	if code != 0 {
		t.Fatalf("rules backtest exited %d:\n%s\n%s", code, out, errOut)
	}
	var rep backtest.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("reading the report: %v\n%s", err, out)
	}
	f, err := os.Open(hitsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("reading %s: %v", hitsFile, err)
	}
	hits := map[string]map[proofHit]bool{backtest.SourceWorkspace: {}, backtest.SourceFile: {}}
	for _, rec := range recs[1:] {
		id, err := event.ParseUUID(rec[2])
		if err != nil {
			t.Fatalf("hit %v: %v", rec, err)
		}
		h := proofHit{rule: rec[1], event: id}
		if hits[rec[0]][h] {
			t.Fatalf("hit %v reported twice", rec)
		}
		hits[rec[0]][h] = true
	}
	t.Logf("workspace %s from %s: %d events evaluated (%d replayed), workspace rules' hits %v, file hits %v", ws,
		from.Format(time.RFC3339), rep.Events, rep.Replayed, countByRule(hits[backtest.SourceWorkspace]), countByRule(hits[backtest.SourceFile]))
	return &rep, hits
}

// eventPlace is an event's workspace and occurred_at.
type eventPlace struct {
	ws event.UUID
	at time.Time
}

// occurredOf maps every stored event to its workspace and occurred_at.
func (s *proofStack) occurredOf(t *testing.T) map[event.UUID]eventPlace {
	t.Helper()
	rows, err := s.super.Query(t.Context(), `SELECT id, workspace_id, occurred_at FROM speculapro.transactions
UNION ALL SELECT id, workspace_id, occurred_at FROM speculapro.account_events`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[event.UUID]eventPlace{}
	for rows.Next() {
		var id event.UUID
		var p eventPlace
		if err := rows.Scan(&id, &p.ws, &p.at); err != nil {
			t.Fatal(err)
		}
		out[id] = p
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// writeProofRuleFile writes proofRules and shadowProofRule (in shadow
// mode) as a rule file.
func writeProofRuleFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("rules:\n")
	for _, r := range append(slices.Clone(proofRules), shadowProofRule) {
		mode := rules.ModeLive
		if r == shadowProofRule {
			mode = rules.ModeShadow
		}
		fmt.Fprintf(&b, "  - name: %s\n    applies_to: %s\n    severity: high\n    action: alert\n    alert: %t\n    mode: %s\n    score: 10\n    expression: %s\n",
			r.name, r.appliesTo, r.alert, mode, strconv.Quote(r.expr))
	}
	path := filepath.Join(t.TempDir(), "proof.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
