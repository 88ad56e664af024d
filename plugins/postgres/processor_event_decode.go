package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
)

const (
	edFieldKind = "kind"
)

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
`+"`pg_copy_upsert`"+`, which then does not decode it again.

Decoding is the heaviest per-record work of the persister. Doing it here lets the engine's pipeline threads
decode the next batches while the output writes the current one.

The time each batch took is recorded in `+"`speculapro_persist_stage_duration_ns`"+` with `+"`stage=\"decode\"`"+`
(per-batch work, not wall-clock: the stages of different batches overlap).`).
		Fields(
			service.NewStringEnumField(edFieldKind, string(event.KindTransaction), string(event.KindAccountEvent)).
				Description("The kind of event the topic carries; a record of another kind is flagged."),
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
	d := &eventDecode{kind: event.Kind(kind), table: tableOfKind(event.Kind(kind))}
	d.duration = mgr.Metrics().NewTimer(metricStageDuration, "table", "stage")
	return d, nil
}

// ProcessBatch flags undecodable messages and attaches the envelope to the
// others; it never fails the batch.
func (d *eventDecode) ProcessBatch(_ context.Context, batch service.MessageBatch) ([]service.MessageBatch, error) {
	start := time.Now()
	out := make(service.MessageBatch, len(batch))
	for i, msg := range batch {
		env, err := decodeMessage(msg, d.kind)
		if err != nil {
			msg.SetError(err)
			out[i] = msg
			continue
		}
		out[i] = withEnvelope(msg, env)
	}
	d.duration.Timing(time.Since(start).Nanoseconds(), d.table, "decode")
	return []service.MessageBatch{out}, nil
}

// Close releases nothing.
func (d *eventDecode) Close(context.Context) error { return nil }

func decodeMessage(msg *service.Message, want event.Kind) (*event.Envelope, error) {
	raw, err := msg.AsBytes()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the record: %v", event.ErrNotJSON, err)
	}
	env, err := event.Decode(raw)
	if err != nil {
		return nil, err
	}
	if env.Kind != want {
		return nil, fmt.Errorf("%w: a %s event on a %s topic", event.ErrNotJSON, env.Kind, want)
	}
	return &env, nil
}
