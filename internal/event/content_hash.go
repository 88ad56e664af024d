package event

import (
	"crypto/sha256"
	"encoding/binary"
	"unsafe"
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
	parts := [...]string{
		string(e.Kind), e.ExternalID, e.AccountExternalID, e.CustomerExternalID, e.Amount, e.Currency,
		string(e.Direction), e.Type, e.Status, e.Reference, e.Channel, string(e.Metadata), string(e.Attributes),
		"", "", "",
	}
	n := len(parts) - 3
	if cp := e.Counterparty; cp != nil {
		parts[n], parts[n+1], parts[n+2] = cp.Name, cp.IdentifierKind, cp.IdentifierFP
		n += 3
	}
	// Each part length-prefixed. A usual item is written to one buffer on
	// the stack and hashed at once (sha256.Sum256 allocates nothing); a
	// larger one is streamed to a digest rather than grown onto the heap.
	size := 0
	for _, p := range parts[:n] {
		size += 4 + len(p)
	}
	var sum [sha256.Size]byte
	if size <= contentHashStack {
		var in [contentHashStack]byte
		b := in[:0]
		for _, p := range parts[:n] {
			b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
			b = append(b, p...)
		}
		sum = sha256.Sum256(b)
	} else {
		h := sha256.New()
		var prefix [4]byte
		for _, p := range parts[:n] {
			binary.BigEndian.PutUint32(prefix[:], uint32(len(p)))
			h.Write(prefix[:])
			// Read in place: a digest neither keeps nor writes what it hashes.
			h.Write(unsafe.Slice(unsafe.StringData(p), len(p)))
		}
		h.Sum(sum[:0])
	}
	var out [ContentHashLen]byte
	copy(out[:], sum[:])
	return out
}

// contentHashStack is the largest content ContentHash hashes from the
// stack: a transaction with a counterparty and a few hundred bytes of
// metadata.
const contentHashStack = 1024
