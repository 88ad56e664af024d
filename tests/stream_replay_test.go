package tests

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/speculapro/speculapro/devtools/pgwritetest"
	"github.com/speculapro/speculapro/devtools/testenv"
)

// resetToStart commits offset 0 on every partition of topic for group (the
// group must have no member), so it reads the topic again from the start.
func (s *proofStack) resetToStart(t *testing.T, group, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs := kadm.Offsets{}
	for part := range s.endOffsets(t, topic) {
		offs.Add(kadm.Offset{Topic: topic, Partition: part, At: 0, LeaderEpoch: -1})
	}
	var err error
	// A member that just left may still be leaving; retry a moment.
	if !poll(30*time.Second, 500*time.Millisecond, func() bool {
		var resp kadm.OffsetResponses
		resp, err = s.adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = resp.Error()
		}
		return err == nil
	}) {
		t.Fatalf("resetting %s on %s to the start: %v", group, topic, err)
	}
}

// rerun runs both pipelines again (group SP_STREAM_GROUP from env, or the
// stack's) until each has read its topic to the end again.
func (s *proofStack) rerun(t *testing.T, name string, env map[string]string, records, events int) {
	t.Helper()
	group := s.group
	if g := env["SP_STREAM_GROUP"]; g != "" {
		group = g
	}
	evp := s.startStream(t, name+"-events", streamEvtPipeline, env)
	s.waitDrained(t, evp, group+"-events", s.prefix+"account.events", events, drainBound(events))
	txns := s.startStream(t, name, streamPipeline, env)
	s.waitDrained(t, txns, group, s.prefix+"txn.ingested", records, drainBound(records))
	stopAll(t, evp, txns)
}

// TestStreamReplayInsideWindow: the group's offsets are reset to the start
// of both topics, inside the replay window, and the stream reads them all
// again: no total changes, no hit or alert is created again.
func TestStreamReplayInsideWindow(t *testing.T) {
	t.Parallel()
	txns, events, accounts := exactSizes()
	cfg := proofConfig(lgSeed(t), txns, events, accounts)
	x := runExact(t, "replay-in", testenv.RedisURL(t), cfg)
	x.check(t, "after the first run", 1)

	x.s.resetToStart(t, x.s.group+"-events", x.s.prefix+"account.events")
	x.s.resetToStart(t, x.s.group, x.s.prefix+"txn.ingested")
	start := time.Now()
	x.s.rerun(t, "replay", nil, cfg.Count, cfg.AccountEvents)
	t.Logf("replayed %d transactions and %d account events from the start in %s", cfg.Count, cfg.AccountEvents, time.Since(start).Round(time.Millisecond))
	x.check(t, "after the replay inside the window", 1)
}

// TestStreamReplayBeyondWindow: a renamed group reads both topics again
// from the start after the replay window (SP_STREAM_REPLAY_TTL=1s) has
// passed. No hit or alert is stored twice and every hit of the first run
// is still there once; the totals show the documented inflation, every
// count and sum exactly twice the model's (distinct counts and times since
// an event unchanged), and the test logs a sample of inflated figures
// beside the reference.
func TestStreamReplayBeyondWindow(t *testing.T) {
	t.Parallel()
	txns, events, accounts := exactSizes()
	cfg := proofConfig(lgSeed(t), txns, events, accounts)
	// The first run already remembers events for a second only.
	x := runExactTTL(t, "replay-out", testenv.RedisURL(t), cfg, "1s")
	x.check(t, "after the first run", 1)
	time.Sleep(2 * time.Second)

	renamed := x.s.group + "-renamed"
	x.s.own(nil, []string{renamed, renamed + "-events"})
	x.s.rerun(t, "renamed", map[string]string{"SP_STREAM_GROUP": renamed, "SP_STREAM_REPLAY_TTL": "1s"}, cfg.Count, cfg.AccountEvents)

	// Hits and alerts: never twice; the first run's all there; rules whose
	// features do not inflate (new payee, SIM swap) exactly as predicted.
	hits, alerts := x.s.hitsInDB(t), x.s.alertsInDB(t)
	for h, n := range hits {
		if n != 1 {
			t.Fatalf("hit %s on %s stored %d times", h.rule, h.event, n)
		}
	}
	for h, n := range alerts {
		if n != 1 {
			t.Fatalf("alert %s on %s stored %d times", h.rule, h.event, n)
		}
	}
	exact := map[string]bool{"t_large_to_new_payee": true, "t_sim_swap_then_transfer": true}
	failDiffs(t, "hits of rules over non-inflating features", compareHits("hit", x.hits, hits, exact))
	var more int
	for h := range x.hits {
		if hits[h] != 1 {
			t.Fatalf("hit %s on %s of the first run: %d rows after the replay", h.rule, h.event, hits[h])
		}
	}
	for h := range hits {
		if !x.hits[h] {
			more++
		}
	}
	t.Logf("after the replay beyond the window: %d hits (%d new, fired on counts the replay inflated; by rule now %v), %d alerts",
		len(hits), more, countByRule(hits), len(alerts))

	// Cases: the new alerts joined their groups' cases, opened nothing
	// twice, and the first run's cases and steps are there once.
	stored := map[proofHit]bool{}
	for h := range alerts {
		stored[h] = true
	}
	failDiffs(t, "cases after a replay beyond the window", pgwritetest.CaseFaults(t, x.s.super))
	failDiffs(t, "case counts after a replay beyond the window", x.caseCountDiffs(t, stored))

	// Totals: the inflation, shown and exact.
	x.logInflation(t)
	failDiffs(t, "totals after a replay beyond the window (want exactly 2x)", x.s.compareTotals(t, x.r, exactSample, cfg.Seed, 2))
}

// logInflation logs a few accounts' counts and sums, stored vs reference.
func (x *exactRun) logInflation(t *testing.T) {
	t.Helper()
	shown := 0
	for k, e := range x.r.model.entities {
		if k.kind != "account" || len(e.txns) < 5 || shown == 5 {
			continue
		}
		shown++
		got, err := x.s.store.ReadAccount(context.Background(), k.workspace, k.key, "EUR")
		if err != nil {
			t.Fatal(err)
		}
		want := e.partyTotals("EUR")
		t.Logf("account %s: out_count_30d stored %v, reference %v; in_count_30d stored %v, reference %v; out_sum_30d stored %v, reference %s",
			k.key, got["out_count_30d"], want["out_count_30d"], got["in_count_30d"], want["in_count_30d"],
			got["out_sum_30d"], modelFormat(want["out_sum_30d"].(*big.Int)))
	}
}
