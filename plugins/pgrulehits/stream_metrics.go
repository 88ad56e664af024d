package pgrulehits

import (
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/pgwrite"
)

// The stream role's metric names written by pg_rule_hits. Each has the label
// `kind` (transaction or account_event), so stream.yaml and
// stream-events.yaml can run in one process. The per-batch write time goes to
// the role's stage timer, which event_decode names and labels
// (speculapro_stream_stage_duration_seconds{table,stage="write"}).
const (
	metricStreamBatches       = "speculapro_stream_batches_total"
	metricStreamHitsStored    = "speculapro_stream_rule_hits_stored_total"
	metricStreamAlertsCreated = "speculapro_stream_alerts_created_total"
	metricStreamCasesOpened   = "speculapro_stream_cases_opened_total"
	metricStreamOutboxQueued  = "speculapro_stream_outbox_queued_total"
	metricStreamSkipped       = "speculapro_stream_records_skipped_total"
	metricStreamRetries       = "speculapro_stream_retries_total"
	metricStreamFaults        = "speculapro_stream_faults_total"
	metricStreamStageDuration = "speculapro_stream_stage_duration_seconds"
)

// counter and timer are what the output uses of the engine's metrics
// (pgwrite.Counter, pgwrite.Timer); tests read their own.
type (
	counter = pgwrite.Counter
	timer   = pgwrite.Timer
)

type streamMetrics struct {
	batches    counter
	hitsStored counter // hits new to rule_hits (a replay stores none); label mode: live, shadow
	alerts     counter // alerts new to alerts
	cases      counter // cases opened (an alert joining an open case opens none)
	outbox     counter // label outbox: webhook_deliveries, notifications
	skipped    counter // label reason: undecodable, rejected
	retries    counter
	faults     counter
	stage      timer // labels table, stage
}

func newStreamMetrics(m *service.Metrics) *streamMetrics {
	return &streamMetrics{
		batches:    m.NewCounter(metricStreamBatches, "kind"),
		hitsStored: m.NewCounter(metricStreamHitsStored, "kind", "mode"),
		alerts:     m.NewCounter(metricStreamAlertsCreated, "kind"),
		cases:      m.NewCounter(metricStreamCasesOpened, "kind"),
		outbox:     m.NewCounter(metricStreamOutboxQueued, "kind", "outbox"),
		skipped:    m.NewCounter(metricStreamSkipped, "kind", "reason"),
		retries:    m.NewCounter(metricStreamRetries, "kind"),
		faults:     m.NewCounter(metricStreamFaults, "kind"),
		stage:      m.NewTimer(metricStreamStageDuration, "table", "stage"),
	}
}
