package pgrulehits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/pgwritetest"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
)

// BenchmarkWriteBatch: one stream batch as the stream writes it, 5,000
// events evaluated against a workspace's 12 rules, 1 % of them hit by a rule
// that alerts (50 hits, 50 alerts, a webhook delivery each), on a fresh
// database; the events evaluated per rule version are counted with the hits
// (markEvaluated). Reported per batch and per event.
func BenchmarkWriteBatch(b *testing.B) {
	next, out := writeBatchBench(b)
	write := func(round int) {
		b.StopTimer()
		msgs := next(round, true)
		b.StartTimer()
		if err := out.WriteBatch(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
	}
	write(0) // the first batch warms the connection and the plans
	b.ResetTimer()
	for i := range b.N {
		write(i + 1)
	}
	b.StopTimer()
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(per/1e6, "ms/batch")
	b.ReportMetric(per/writeBenchBatch, "ns/event")
}

// BenchmarkWriteBatchEvaluationCount: what counting the events evaluated
// per rule version costs the write, measured paired so the machine's load
// weighs on both alike: each round writes one batch whose events carry the
// rules they were evaluated against (counted) and one whose do not (the
// write as it was without the counts), alternating which goes first.
func BenchmarkWriteBatchEvaluationCount(b *testing.B) {
	next, out := writeBatchBench(b)
	ctx := context.Background()
	write := func(round int, counted bool) time.Duration {
		msgs := next(round, counted)
		start := time.Now()
		if err := out.WriteBatch(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	write(0, true) // the first batches warm the connection and the plans
	write(1, false)
	var counted, plain time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			counted += write(2*i+2, true)
			plain += write(2*i+3, false)
		} else {
			plain += write(2*i+2, false)
			counted += write(2*i+3, true)
		}
	}
	b.StopTimer()
	b.ReportMetric(counted.Seconds()*1e3/float64(b.N), "ms/batch-counted")
	b.ReportMetric(plain.Seconds()*1e3/float64(b.N), "ms/batch-plain")
	b.ReportMetric(counted.Seconds()/plain.Seconds(), "counted/plain")
}

// writeBenchBatch is the events of one stream batch.
const writeBenchBatch = 5000

// writeBatchBench is a fresh database with a workspace of 12 rules and a
// webhook endpoint, and pg_rule_hits on it; next(round, counted) is round's
// batch as rule_eval leaves it (new events each round, 1 % hit by a rule
// that alerts; counted: they carry the rules evaluated).
func writeBatchBench(b *testing.B) (func(round int, counted bool) service.MessageBatch, *pgRuleHits) {
	const batch, rulesPerWorkspace, hitEvery = writeBenchBatch, 12, 100
	db := dbtest.New(b)
	conn := db.Connect(b, db.SuperuserURL)
	ctx := context.Background()
	ws := pgwritetest.Workspace(b, conn, "bench")
	pgwritetest.Exec(b, conn, `INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted) VALUES ($1, 'https://example.test/hook', '\x00')`, ws)
	var ids []event.UUID
	for i := range rulesPerWorkspace {
		var id event.UUID
		if err := conn.QueryRow(ctx, `INSERT INTO speculapro.rules (workspace_id, name, expression, severity, action, alert, score)
VALUES ($1, $2, 'true', 'high', 'alert', true, 40) RETURNING id`, ws, fmt.Sprintf("rule_%d", i)).Scan(&id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	out, err := newPgRuleHits(ctx, prhOptions{
		url: db.SystemURL, kind: event.KindTransaction, maxConns: 1,
		initialBackoff: 20 * time.Millisecond, maxBackoff: 200 * time.Millisecond,
		attemptTimeout: 30 * time.Second, startupTimeout: 10 * time.Second,
	}, service.MockResources())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = out.Close(ctx) })
	if err := out.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	hitter := testRule{id: ids[0], name: "rule_0", severity: "high", alert: true}
	// One batch's messages, as rule_eval leaves them; each round's events
	// are new (offsets and ids move on).
	next := func(round int, counted bool) service.MessageBatch {
		first := round * batch
		msgs := evaluated(b, ws, first, first+batch)
		for i := 0; i < len(msgs); i += hitEvery {
			msgs[i].MetaSetMut(metaRuleEval, map[string]any{"hits": []any{hitter.hit()}})
		}
		if counted {
			msgs = markEvaluated(msgs, ws, ids)
		}
		return msgs
	}
	return next, out
}
