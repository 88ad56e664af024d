package pgcopyupsert

import (
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/pgwrite"
)

// Metric names. Every one has the label `table` (transactions or
// account_events), so the two persist pipelines can run in one process.
const (
	metricBatches        = "speculapro_persist_batches_total"
	metricRowsStored     = "speculapro_persist_rows_stored_total"
	metricRowsSkipped    = "speculapro_persist_rows_skipped_total"
	metricPlaceholders   = "speculapro_persist_placeholders_created_total"
	metricCounterparties = "speculapro_persist_counterparties_created_total"
	metricDeadLetters    = "speculapro_persist_dead_letters_total"
	metricRetries        = "speculapro_persist_retries_total"
	metricFaults         = "speculapro_persist_faults_total"
	// metricStageDuration is per-batch work in one stage (decode, prepare,
	// write, dead_letter), not wall-clock: the stages of different batches
	// overlap, so their sum over-reports how long a batch took to land.
	// Consumer lag is the keep-up signal.
	metricStageDuration = "speculapro_persist_stage_duration_seconds"
)

// counter and timer are what the output uses of the engine's metrics
// (pgwrite.Counter, pgwrite.Timer); tests read their own.
type (
	counter = pgwrite.Counter
	timer   = pgwrite.Timer
)

type persistMetrics struct {
	batches        counter
	stored         counter
	skipped        counter
	placeholders   counter // label entity: customer, account
	counterparties counter
	deadLetters    counter // label reason: undecodable, rejected
	retries        counter
	faults         counter
	stage          timer // label stage
}

func newPersistMetrics(m *service.Metrics) *persistMetrics {
	return &persistMetrics{
		batches:        m.NewCounter(metricBatches, "table"),
		stored:         m.NewCounter(metricRowsStored, "table"),
		skipped:        m.NewCounter(metricRowsSkipped, "table"),
		placeholders:   m.NewCounter(metricPlaceholders, "table", "entity"),
		counterparties: m.NewCounter(metricCounterparties, "table"),
		deadLetters:    m.NewCounter(metricDeadLetters, "table", "reason"),
		retries:        m.NewCounter(metricRetries, "table"),
		faults:         m.NewCounter(metricFaults, "table"),
		stage:          m.NewTimer(metricStageDuration, "table", "stage"),
	}
}
