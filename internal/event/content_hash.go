package event

import (
	"crypto/sha256"
	"encoding/binary"
)

// ContentHashLen is the length of a ContentHash.
const ContentHashLen = 8

// ContentHash is what decides that a resend of an external_id is the same
// item: 8 bytes of SHA-256 over every field the client sent except
// occurred_at (a resend is answered with the first ID whatever its time,
// see TransactionID), the counterparty identifier by its keyed fingerprint
// (so no clear identifier is hashed). The ingest API keeps it in Redis and
// the persister stores it with the row, so both compare by the same bytes;
// what the ingest API builds and what the persister decodes from it hash
// alike (TestContentHashSurvivesTheRecord). It never changes: a resend may
// reach the next version within the idempotency TTL, and stored rows keep it
// for good. A decision the envelope carries is not content.
func ContentHash(e *Envelope) [ContentHashLen]byte {
	// Each part length-prefixed, all in one buffer hashed at once (on the
	// stack for a usual item; sha256.Sum256 allocates nothing).
	var in [1024]byte
	b := in[:0]
	write := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	write(string(e.Kind))
	write(e.ExternalID)
	write(e.AccountExternalID)
	write(e.CustomerExternalID)
	write(e.Amount)
	write(e.Currency)
	write(string(e.Direction))
	write(e.Type)
	write(e.Status)
	write(e.Reference)
	write(e.Channel)
	write(string(e.Metadata))
	write(string(e.Attributes))
	if cp := e.Counterparty; cp != nil {
		write(cp.Name)
		write(cp.IdentifierKind)
		write(cp.IdentifierFP)
	}
	sum := sha256.Sum256(b)
	var out [ContentHashLen]byte
	copy(out[:], sum[:])
	return out
}
