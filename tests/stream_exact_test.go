package tests

import (
	"context"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/devtools/pgwritetest"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/event"
)

// exactSizes are the exactness tests' sizes: 100,000
// transactions and 10,000 account events over 2,000 accounts under
// SP_TEST_SCALE=full (make chaos), else a fifth of it.
func exactSizes() (txns, events, accounts int) {
	if fullScale() {
		return 100000, 10000, 2000
	}
	return 20000, 2000, 400
}

// exactSample is how many accounts' totals are compared (with their
// customers and counterparties).
const exactSample = 200

// drainBound is how long a stream may take to read a test's topic.
func drainBound(records int) time.Duration {
	return 2*time.Minute + time.Duration(records/500)*time.Second
}

// exactRun is a finished run of both stream pipelines over one generated
// load: account events first (drained by stream-events), then the
// transactions (drained by stream), so that the features a rule reads when
// it fires can be recomputed (see proofRules).
type exactRun struct {
	s       *proofStack
	r       *proofRun
	hits    map[proofHit]bool // predicted
	ruleIDs map[event.UUID]string
}

func runExact(t *testing.T, name, redisURL string, cfg loadgen.Config) *exactRun {
	t.Helper()
	return runExactTTL(t, name, redisURL, cfg, "30m")
}

// newExactRun seeds r's known accounts into s's database, inserts the proof
// rules (and extra) for r's workspaces, and predicts their hits from the
// model: what the exactness, crash and bad-input runs are checked against.
func newExactRun(t *testing.T, s *proofStack, r *proofRun, extra ...proofRule) *exactRun {
	t.Helper()
	if _, err := loadgen.SeedKnownURL(context.Background(), s.db.SystemURL, r.g); err != nil {
		t.Fatal(err)
	}
	x := &exactRun{s: s, r: r, ruleIDs: s.insertRules(t, r.g.Workspaces(), extra...)}
	s.caseSettings(t, r.g.Workspaces())
	var err error
	if x.hits, err = predictHits(r.events, r.txns); err != nil {
		t.Fatal(err)
	}
	return x
}

// runExactTTL is runExact with SP_STREAM_REPLAY_TTL=ttl.
func runExactTTL(t *testing.T, name, redisURL string, cfg loadgen.Config, ttl string) *exactRun {
	t.Helper()
	testenv.Binary(t)
	s := newProofStack(t, name, redisURL)
	s.replayTTL = ttl
	r := newProofRun(t, cfg)
	x := newExactRun(t, s, r)
	t.Logf("seed %d: %d transactions and %d account events over %d accounts; predicted hits by rule %v",
		cfg.Seed, cfg.Count, cfg.AccountEvents, cfg.Accounts, countByRule(x.hits))

	start := time.Now()
	events := s.applyAccountEvents(t, r, cfg.AccountEvents, nil)
	t.Logf("account events drained in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	s.produceLG(t, r.g, event.KindTransaction, 0, cfg.Count, 0)
	txns := s.startStream(t, "stream", streamPipeline, nil)
	s.waitDrained(t, txns, s.group, s.prefix+"txn.ingested", cfg.Count, drainBound(cfg.Count))
	t.Logf("transactions drained in %s", time.Since(start).Round(time.Millisecond))
	stopAll(t, events, txns)
	return x
}

// check compares the stored totals, hits and alerts with the model; scale
// is 1, or 2 after a replay beyond the window.
func (x *exactRun) check(t *testing.T, what string, scale int64) {
	t.Helper()
	failDiffs(t, what+": totals", x.s.compareTotals(t, x.r, exactSample, x.r.g.Config().Seed, scale))
	x.checkHits(t, what)
}

// checkHits: every predicted hit stored exactly once and nothing else; an
// alert for exactly the hits of rules that raise one; every alert in exactly
// one case, the open case of its group, each case opened once, one
// attachment per alert, and each case step queued once per subscribed
// webhook endpoint (pgwritetest.CaseFaults).
func (x *exactRun) checkHits(t *testing.T, what string) {
	t.Helper()
	hits, alerts := x.s.hitsInDB(t), x.s.alertsInDB(t)
	t.Logf("%s: %d hits stored %v, %d alerts", what, len(hits), countByRule(hits), len(alerts))
	failDiffs(t, what+": rule hits", compareHits("hit", x.hits, hits, nil))
	wantAlerts := map[proofHit]bool{}
	alerting := map[string]bool{}
	for _, r := range proofRules {
		alerting[r.name] = r.alert
	}
	for h := range x.hits {
		if alerting[h.rule] {
			wantAlerts[h] = true
		}
	}
	failDiffs(t, what+": alerts", compareHits("alert", wantAlerts, alerts, nil))
	if n := persistCountAny(t, x.s, "SELECT count(*) FROM speculapro.alerts"); n != len(wantAlerts) {
		t.Fatalf("%s: %d alerts in all, want %d", what, n, len(wantAlerts))
	}
	t.Logf("%s: %d cases, %d case events, %d case deliveries", what,
		persistCountAny(t, x.s, "SELECT count(*) FROM speculapro.cases"),
		persistCountAny(t, x.s, "SELECT count(*) FROM speculapro.case_events"),
		persistCountAny(t, x.s, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE event_type LIKE 'case.%'"))
	failDiffs(t, what+": cases", pgwritetest.CaseFaults(t, x.s.super))
	failDiffs(t, what+": case counts", x.caseCountDiffs(t, wantAlerts))
}

// persistCountAny runs a count query on the stack's database.
func persistCountAny(t *testing.T, s *proofStack, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.super.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestStreamExactness: after both stream pipelines read a generated load,
// every total of a sample of accounts, their customers and counterparties
// equals the reference model's, and the rule hits and alerts are exactly
// those the rules' definitions predict.
func TestStreamExactness(t *testing.T) {
	t.Parallel()
	txns, events, accounts := exactSizes()
	x := runExact(t, "exact", testenv.RedisURL(t), proofConfig(lgSeed(t), txns, events, accounts))
	x.check(t, "after the run", 1)
}

// TestStreamExactnessOnRedisCluster is the exactness test on the local
// stack's three-master Redis Cluster.
func TestStreamExactnessOnRedisCluster(t *testing.T) {
	t.Parallel()
	txns, events, accounts := exactSizes()
	x := runExact(t, "exact-cluster", testenv.RedisClusterURL(t), proofConfig(lgSeed(t), txns, events, accounts))
	x.check(t, "on the cluster", 1)
}
