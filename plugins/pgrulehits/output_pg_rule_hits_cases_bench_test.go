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

// benchAlertsPerBatch is a batch's events in BenchmarkAlertCreation, each hit
// by one alerting rule; benchCustomers is how many customers they belong to
// (so most batches both open cases and join open ones); benchWarmBatches
// are written before the timed ones.
const (
	benchAlertsPerBatch = 500
	benchCustomers      = 3000
	benchWarmBatches    = 6
)

// BenchmarkAlertCreation is the stream's write of a batch in which every
// event raises an alert, reported per alert (ns/alert): the rule hits, the
// alerts, their cases and case events, in one transaction per batch. Each
// sub-benchmark is a workspace grouping its cases one way. Run beside the
// same benchmark on a tree without cases to compare (docs/benchmarks.md).
func BenchmarkAlertCreation(b *testing.B) {
	for _, grouping := range []string{"customer", "account", "alert"} {
		b.Run(grouping, func(b *testing.B) { benchAlertCreation(b, grouping) })
	}
}

func benchAlertCreation(b *testing.B, grouping string) {
	db := dbtest.New(b)
	conn := db.Connect(b, db.SuperuserURL)
	ws := pgwritetest.Workspace(b, conn, "bench")
	if grouping != "customer" {
		pgwritetest.Exec(b, conn, "UPDATE speculapro.workspaces SET case_grouping = $2 WHERE id = $1", ws, grouping)
	}
	rule := testRule{name: "large_amount", severity: "high", alert: true}
	if err := conn.QueryRow(context.Background(), `
INSERT INTO speculapro.rules (workspace_id, name, description, expression, severity, action, alert, score)
VALUES ($1, $2, 'bench', 'true', $3, 'alert', true, 40) RETURNING id`, ws, rule.name, rule.severity).Scan(&rule.id); err != nil {
		b.Fatal(err)
	}
	out, err := newPgRuleHits(context.Background(), prhOptions{
		url: db.SystemURL, kind: event.KindTransaction, maxConns: 1,
		initialBackoff: 20 * time.Millisecond, maxBackoff: 200 * time.Millisecond,
		attemptTimeout: time.Minute, startupTimeout: 10 * time.Second,
	}, service.MockResources())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = out.Close(context.Background()) })
	spread := func(e *event.Envelope) {
		n := e.OccurredAt.Sub(pgwritetest.BaseTime).Milliseconds()
		e.CustomerExternalID = fmt.Sprintf("cust-%d", n%benchCustomers)
	}
	batches := make([]service.MessageBatch, benchWarmBatches+b.N)
	for i := range batches {
		batches[i] = evaluatedWith(b, ws, i*benchAlertsPerBatch, (i+1)*benchAlertsPerBatch, spread, rule)
	}
	ctx := context.Background()
	// A running stream writes into tables whose statistics autovacuum
	// keeps: the first batches, then ANALYZE, so the timed ones are planned
	// as they are then, not for tables the planner believes empty.
	for _, batch := range batches[:benchWarmBatches] {
		if err := out.WriteBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	pgwritetest.Exec(b, conn, "ANALYZE")
	b.ResetTimer()
	for _, batch := range batches[benchWarmBatches:] {
		if err := out.WriteBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchAlertsPerBatch), "ns/alert")
	var alerts int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM speculapro.alerts").Scan(&alerts); err != nil || alerts != len(batches)*benchAlertsPerBatch {
		b.Fatalf("%d alerts (err %v), want %d", alerts, err, len(batches)*benchAlertsPerBatch)
	}
}
