package eventmsg

import (
	"context"
	"fmt"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
)

type envelopeKey struct{}

// With returns msg carrying env.
func With(msg *service.Message, env *event.Envelope) *service.Message {
	return msg.WithContext(context.WithValue(msg.Context(), envelopeKey{}, env))
}

// Of returns the envelope event_decode attached to msg, decoding the content
// when the pipeline has no event_decode step. The error is an undecodable
// one (event.IsUndecodable): not an envelope, or not of the kind wanted.
func Of(msg *service.Message, want event.Kind) (*event.Envelope, error) {
	if env, ok := msg.Context().Value(envelopeKey{}).(*event.Envelope); ok {
		return env, nil
	}
	return Decode(msg, want)
}

// Decode decodes msg's content as an envelope of kind want.
func Decode(msg *service.Message, want event.Kind) (*event.Envelope, error) {
	return decode(msg, want, event.Decode)
}

// DecodeShared is Decode with an envelope that shares the content's memory
// (event.DecodeShared): for a message whose content nobody changes, such as
// a kafka_franz record's, and whose envelope is not kept beyond the message
// (it would keep the record's whole fetch buffer alive).
func DecodeShared(msg *service.Message, want event.Kind) (*event.Envelope, error) {
	return decode(msg, want, event.DecodeShared)
}

func decode(msg *service.Message, want event.Kind, dec func([]byte) (event.Envelope, error)) (*event.Envelope, error) {
	var env event.Envelope
	err := decodeInto(&env, msg, want, func(raw []byte) (err error) {
		env, err = dec(raw)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &env, nil
}

// DecodeSharedInto is DecodeShared writing the envelope to dst and the
// record's counterparty to cp (event.DecodeSharedInto), for a caller that
// keeps a batch's envelopes and counterparties in slices of its own: no
// allocation a record. dst and cp are left unspecified on an error.
func DecodeSharedInto(dst *event.Envelope, cp *event.Counterparty, msg *service.Message, want event.Kind) error {
	return decodeInto(dst, msg, want, func(raw []byte) error { return event.DecodeSharedInto(dst, cp, raw) })
}

// decodeInto is every decoder here: the record's bytes, dec, then the kind,
// so that each reports an undecodable record in the same words.
func decodeInto(dst *event.Envelope, msg *service.Message, want event.Kind, dec func([]byte) error) error {
	raw, err := msg.AsBytes()
	if err != nil {
		return fmt.Errorf("%w: reading the record: %v", event.ErrNotJSON, err)
	}
	if err := dec(raw); err != nil {
		return err
	}
	if dst.Kind != want {
		return fmt.Errorf("%w: a %s event on a %s topic", event.ErrNotJSON, dst.Kind, want)
	}
	return nil
}

// Slots are envelopes to decode a batch's messages into, each with its
// record's counterparty and the context node that attaches it to its
// message, allocated together: one allocation a batch for what With and
// DecodeShared cost up to three a message (the envelope, the counterparty,
// context.WithValue's node). A slot lives as long as the last message of the
// batch that holds one does; slots are never reused.
type Slots []slot

type slot struct {
	context.Context
	env event.Envelope
	cp  event.Counterparty
}

// Value answers envelopeKey with the slot's envelope, the rest as the
// message's own context does.
func (s *slot) Value(key any) any {
	if _, ok := key.(envelopeKey); ok {
		return &s.env
	}
	return s.Context.Value(key)
}

// NewSlots allocates n slots.
func NewSlots(n int) Slots { return make(Slots, n) }

// DecodeShared decodes msg into slot i as DecodeShared does (the same
// errors) and returns msg carrying the envelope; on an error it returns msg
// itself and slot i stays unused.
func (s Slots) DecodeShared(i int, msg *service.Message, want event.Kind) (*service.Message, error) {
	sl := &s[i]
	if err := DecodeSharedInto(&sl.env, &sl.cp, msg, want); err != nil {
		return msg, err
	}
	sl.Context = msg.Context()
	return msg.WithContext(sl), nil
}

// Attached returns the envelope event_decode attached to msg, without
// decoding anything when there is none.
func Attached(msg *service.Message) (*event.Envelope, bool) {
	env, ok := msg.Context().Value(envelopeKey{}).(*event.Envelope)
	return env, ok
}
