package eventdecode

import (
	"context"
	"fmt"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
)

const (
	edFieldKind = "kind"
	edFieldRole = "role"
)

// Every role's per-stage timer, named after the role that runs the step
// (speculapro_persist_stage_duration_seconds, speculapro_stream_stage_duration_seconds).
const metricStageDurationFormat = "speculapro_%s_stage_duration_seconds"

func eventDecodeSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Parsing").
		Summary("Decodes and validates each record's SpeculaPro event envelope and flags the records that cannot be read, so that `pg_copy_upsert` can store the rest and dead-letter those.").
		Description(`
Each message's content is decoded as an event envelope (`+"`internal/event`"+`). A record that is not JSON, has an
unknown version, lacks its `+"`id`"+` or `+"`workspace_id`"+`, fails the envelope's validation, or is of another
`+"`kind`"+` than configured is flagged with an error (test it with `+"`errored()`"+`); its content is left exactly as
it arrived. A readable record is also left as it arrived, and carries its decoded envelope to
the next steps (`+"`pg_copy_upsert`"+`, `+"`feature_update`"+`, `+"`rule_eval`"+`), which then do not decode it again.

Decoding is the heaviest per-record work of the persister. Doing it here lets the engine's pipeline threads
decode the next batches while the output writes the current one.

The time each batch took is recorded in `+"`speculapro_<role>_stage_duration_seconds`"+` with `+"`stage=\"decode\"`"+`
(per-batch work, not wall-clock: the stages of different batches overlap).`).
		Fields(
			service.NewStringEnumField(edFieldKind, string(event.KindTransaction), string(event.KindAccountEvent)).
				Description("The kind of event the topic carries; a record of another kind is flagged."),
			service.NewStringEnumField(edFieldRole, "persist", "stream").
				Description("The role running the step, which names its stage-duration metric.").
				Default("persist").
				Advanced(),
		).
		Example("Transactions", "", `
pipeline:
  processors:
    - event_decode:
        kind: transaction
`)
}

func init() {
	service.MustRegisterBatchProcessor("event_decode", eventDecodeSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchProcessor, error) {
			return newEventDecode(conf, mgr)
		})
}

// timer is what the processor uses of a *service.MetricTimer; tests read their own.
type timer interface {
	Timing(delta int64, labelValues ...string)
}

type eventDecode struct {
	kind     event.Kind
	duration timer
	table    string
}

func newEventDecode(conf *service.ParsedConfig, mgr *service.Resources) (*eventDecode, error) {
	kind, err := conf.FieldString(edFieldKind)
	if err != nil {
		return nil, err
	}
	if k := event.Kind(kind); k != event.KindTransaction && k != event.KindAccountEvent {
		return nil, fmt.Errorf("event_decode: %s must be %s or %s, got %q", edFieldKind, event.KindTransaction, event.KindAccountEvent, kind)
	}
	role, err := conf.FieldString(edFieldRole)
	if err != nil {
		return nil, err
	}
	if role != "persist" && role != "stream" {
		return nil, fmt.Errorf("event_decode: %s must be persist or stream, got %q", edFieldRole, role)
	}
	d := &eventDecode{kind: event.Kind(kind), table: event.Kind(kind).Table()}
	d.duration = mgr.Metrics().NewTimer(fmt.Sprintf(metricStageDurationFormat, role), "table", "stage")
	return d, nil
}

// ProcessBatch flags undecodable messages and attaches the envelope to the
// others; it never fails the batch.
func (d *eventDecode) ProcessBatch(_ context.Context, batch service.MessageBatch) ([]service.MessageBatch, error) {
	start := time.Now()
	// The batch's envelopes in one allocation (not two a record); each
	// lives as long as the last message of the batch does. In place: the
	// engine hands each step a batch of its own.
	slots := eventmsg.NewSlots(len(batch))
	for i, msg := range batch {
		// Both roles decode in place: an envelope lives only as long as its
		// message, whose content is the same fetch buffer, and the stream keeps
		// nothing of one past its batch (the running totals intern the strings a
		// state keeps, rule hits hold rule fields and feature values, and
		// pg_rule_hits builds its rows anew).
		withEnv, err := slots.DecodeShared(i, msg, d.kind)
		if err != nil {
			msg.SetError(err)
			continue
		}
		batch[i] = withEnv
	}
	d.duration.Timing(time.Since(start).Nanoseconds(), d.table, "decode")
	return []service.MessageBatch{batch}, nil
}

// Close releases nothing.
func (d *eventDecode) Close(context.Context) error { return nil }
