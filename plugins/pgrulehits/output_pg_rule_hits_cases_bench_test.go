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
// event raises an alert, reported per alert: the rule hits, the alerts,
// their cases and case events, in one transaction per batch (ns/alert), and
// the same write without cases (ns/alert-without: the hits and the alerts
// only, as a workspace without cases would write them), the two alternated
// batch by batch on the same database, so both see the same tables and the
// same load; cases/without is their ratio. Each sub-benchmark is a
// workspace grouping its cases one way.
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
	// writers[0] opens cases, writers[1] writes the same kind of batch
	// without them.
	var writers [2]*pgRuleHits
	for i := range writers {
		out, err := newPgRuleHits(context.Background(), prhOptions{
			url: db.SystemURL, kind: event.KindTransaction, maxConns: 1,
			initialBackoff: 20 * time.Millisecond, maxBackoff: 200 * time.Millisecond,
			attemptTimeout: time.Minute, startupTimeout: 10 * time.Second,
		}, service.MockResources())
		if err != nil {
			b.Fatal(err)
		}
		out.withoutCases = i == 1
		b.Cleanup(func() { _ = out.Close(context.Background()) })
		writers[i] = out
	}
	spread := func(e *event.Envelope) {
		n := e.OccurredAt.Sub(pgwritetest.BaseTime).Milliseconds()
		e.CustomerExternalID = fmt.Sprintf("cust-%d", n%benchCustomers)
	}
	batches := make([]service.MessageBatch, 2*(benchWarmBatches+b.N))
	for i := range batches {
		batches[i] = evaluatedWith(b, ws, i*benchAlertsPerBatch, (i+1)*benchAlertsPerBatch, spread, rule)
	}
	ctx := context.Background()
	// write sends batch i to one writer, alternately, the order swapped
	// every pair so neither always follows the other.
	var spent [2]time.Duration
	write := func(i int) {
		w := (i + i/2) % 2
		start := time.Now()
		if err := writers[w].WriteBatch(ctx, batches[i]); err != nil {
			b.Fatal(err)
		}
		spent[w] += time.Since(start)
	}
	// A running stream writes into tables whose statistics autovacuum
	// keeps: the first batches, then ANALYZE, so the timed ones are planned
	// as they are then, not for tables the planner believes empty.
	for i := range 2 * benchWarmBatches {
		write(i)
	}
	pgwritetest.Exec(b, conn, "ANALYZE")
	spent = [2]time.Duration{}
	b.ResetTimer()
	for i := 2 * benchWarmBatches; i < len(batches); i++ {
		write(i)
	}
	b.StopTimer()
	alertsEach := float64(b.N * benchAlertsPerBatch)
	b.ReportMetric(float64(spent[0].Nanoseconds())/alertsEach, "ns/alert")
	b.ReportMetric(float64(spent[1].Nanoseconds())/alertsEach, "ns/alert-without")
	b.ReportMetric(float64(spent[0])/float64(spent[1]), "cases/without")
	var alerts, cased int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(case_id) FROM speculapro.alerts").Scan(&alerts, &cased); err != nil ||
		alerts != len(batches)*benchAlertsPerBatch || cased != alerts/2 {
		b.Fatalf("%d alerts, %d in cases (err %v), want %d, half in cases", alerts, cased, err, len(batches)*benchAlertsPerBatch)
	}
}
