package postgres

import (
	"context"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
)

// envelopeKey carries a decoded envelope on a message's context from the
// event_decode processor to the pg_copy_upsert output, so the output does not
// decode every record a second time on its single writer goroutine. The raw
// bytes stay the message's content: a dead letter must leave with them as
// they arrived.
type envelopeKey struct{}

// withEnvelope returns msg carrying env.
func withEnvelope(msg *service.Message, env *event.Envelope) *service.Message {
	return msg.WithContext(context.WithValue(msg.Context(), envelopeKey{}, env))
}

// envelopeOf returns the envelope event_decode attached to msg, decoding the
// content when the pipeline has no event_decode step. The error is an
// undecodable one (event.IsUndecodable) or a wrong kind for this table.
func envelopeOf(msg *service.Message, want event.Kind) (*event.Envelope, error) {
	if env, ok := msg.Context().Value(envelopeKey{}).(*event.Envelope); ok {
		return env, nil
	}
	return decodeMessage(msg, want)
}
