package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Version is the envelope version this build writes and reads (`"v": 1`).
const Version = 1

// Decode's error classes. Every error Decode returns wraps exactly one of
// them, so errors.Is against these five covers all of Decode's failures; a
// record failing any of them can never be read (or stored) by this version
// and is dead-lettered by the persister, never retried.
var (
	// ErrNotJSON: the record is not JSON, or is JSON but not an envelope this
	// version can read (a field of the wrong type, an unknown kind, a missing
	// or malformed required field such as occurred_at or amount).
	ErrNotJSON = errors.New("not a JSON event envelope")
	// ErrUnknownVersion: `v` is missing or not a version this build reads.
	ErrUnknownVersion = errors.New("unknown event version")
	// ErrMissingID: `id` is missing, the nil UUID, or not a UUID.
	ErrMissingID = errors.New("event has no id")
	// ErrMissingWorkspace: `workspace_id` is missing, the nil UUID, or not a UUID.
	ErrMissingWorkspace = errors.New("event has no workspace_id")
	// ErrOutOfLimits: a field is outside the limits the ingest API
	// documents and the table holds (limits.go): too long, control
	// characters, an amount numeric(20,4) cannot hold, a currency or enum
	// value not in the list, an occurred_at no partition will hold.
	ErrOutOfLimits = errors.New("event field outside its limits")
)

// IsUndecodable reports whether err is one of Decode's classes, i.e. the
// record should go to the dead-letter topic rather than be retried.
func IsUndecodable(err error) bool {
	return errors.Is(err, ErrNotJSON) || errors.Is(err, ErrUnknownVersion) ||
		errors.Is(err, ErrMissingID) || errors.Is(err, ErrMissingWorkspace) ||
		errors.Is(err, ErrOutOfLimits)
}

// Kind says what an envelope carries.
type Kind string

// The kinds of envelope.
const (
	KindTransaction  Kind = "transaction"
	KindAccountEvent Kind = "account_event"
)

// Direction of a transaction's money, seen from the monitored account.
type Direction string

// The directions.
const (
	DirectionIn  Direction = "in"
	DirectionOut Direction = "out"
)

// Outcome of a real-time decision.
type Outcome string

// The outcomes.
const (
	OutcomeApprove Outcome = "approve"
	OutcomeReview  Outcome = "review"
	OutcomeDecline Outcome = "decline"
)

// Envelope is one event on Kafka, version 1. Fields common to both kinds come
// first; the rest belong to one kind and are left empty (and omitted from the
// JSON) for the other. Decode returns times in UTC and metadata/attributes
// as compact JSON objects, so a decoded envelope re-encodes byte-stably.
type Envelope struct {
	V           int    `json:"v"`
	Kind        Kind   `json:"kind"`
	ID          UUID   `json:"id"` // fixed by ingest: TransactionID / AccountEventID
	WorkspaceID UUID   `json:"workspace_id"`
	ExternalID  string `json:"external_id"`
	// OccurredAt is when it happened at the customer's system; it decides the
	// monthly partition. ReceivedAt is when the ingest API accepted it.
	OccurredAt time.Time `json:"occurred_at"`
	ReceivedAt time.Time `json:"received_at,omitzero"`

	// Both kinds: an account event names its customer and may name an account.
	CustomerExternalID string `json:"customer_external_id,omitempty"`
	AccountExternalID  string `json:"account_external_id,omitempty"`
	// Type is the transaction type (card, transfer, …) or the account event
	// type (sign_in, failed_otp, sim_swap, profile_change, …).
	Type string `json:"type,omitempty"`

	// Transactions. Amount is a decimal string ("1234.50"), never a float, so
	// no cent is lost between the customer's system and PostgreSQL's numeric.
	Amount       string        `json:"amount,omitempty"`
	Currency     string        `json:"currency,omitempty"` // ISO 4217, e.g. EUR
	Direction    Direction     `json:"direction,omitempty"`
	Status       string        `json:"status,omitempty"`
	Reference    string        `json:"reference,omitempty"`
	Channel      string        `json:"channel,omitempty"`
	Counterparty *Counterparty `json:"counterparty,omitempty"`
	// Metadata is the client's free-form JSON object, stored as jsonb as is.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Decision is set when the transaction came through the real-time
	// decision API.
	Decision *Decision `json:"decision,omitempty"`

	// Account events: what the event says (device, IP, changed field, …).
	Attributes json.RawMessage `json:"attributes,omitempty"`
}

// Counterparty is the other side of a transaction. Its name travels as sent;
// its identifier only encrypted, masked and fingerprinted (package identity,
// processor counterparty_fingerprint).
type Counterparty struct {
	Name             string `json:"name,omitempty"`
	IdentifierKind   string `json:"identifier_kind,omitempty"`   // iban | account_number | phone
	IdentifierEnc    string `json:"identifier_enc,omitempty"`    // "<key-id>:" + base64 AES-256-GCM
	IdentifierMasked string `json:"identifier_masked,omitempty"` // "DE89 **** **** **** 3000"
	IdentifierFP     string `json:"identifier_fp,omitempty"`     // hex HMAC-SHA256, matches an account's
	// Fingerprint de-duplicates counterparties within a workspace; see
	// identity.Fingerprinter.Counterparty and CounterpartyID.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// Decision is the real-time decision a transaction was answered with.
type Decision struct {
	Outcome   Outcome   `json:"outcome"`
	Score     float64   `json:"score"`
	Reasons   []string  `json:"reasons,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// RuleIDs are the rules that fired (stored in decisions.rule_ids),
	// LatencyMS the time the answer took, and Degraded marks the
	// workspace's fallback outcome given because the rules or the running
	// totals could not finish in time.
	RuleIDs   []UUID `json:"rule_ids,omitempty"`
	LatencyMS int    `json:"latency_ms,omitempty"`
	Degraded  bool   `json:"degraded,omitempty"`
}

// Decode reads one envelope. It is the only reader of the format: every
// consumer goes through it, so what is refused here is refused everywhere.
// Errors wrap one of ErrNotJSON, ErrUnknownVersion, ErrMissingID,
// ErrMissingWorkspace or ErrOutOfLimits and never quote the record (it may
// hold names and amounts). Every limit of limits.go is checked, the
// occurred_at window against the wall clock (DecodeWindow(time.Now())).
//
// One decoder reads every record: decodeFast, which reads the shape
// AppendRecord writes (escaped strings included) with no reflection and
// about one allocation, and encoding/json for the rest (a record decodeFast
// is unsure of: a null, an unknown or differently cased key, a key named
// twice, a time it cannot tell from absent) and for every error, so that
// whatever is read or refused is read or refused as encoding/json does
// (codec_differential_test.go holds the two paths to that).
//
// A record in the shape Encode writes is read by decodeFast first, and by
// encoding/json only when decodeFast is unsure of it or it fails a check.
func Decode(b []byte) (Envelope, error) {
	return DecodeAt(b, time.Now())
}

// DecodeAt is Decode with now as the clock the occurred_at window is
// measured from, for records (and tests) of a fixed time.
func DecodeAt(b []byte, now time.Time) (Envelope, error) {
	return decodeAt(b, now, false)
}

// DecodeShared is Decode for a record nobody writes to while the envelope
// is in use (a Kafka record's value, which the client never reuses): the
// envelope's strings and metadata share b's memory instead of a copy, which
// spares the persister a copy of every record. A changed b changes the
// envelope, and an envelope kept keeps all of b alive.
func DecodeShared(b []byte) (Envelope, error) {
	return decodeAt(b, time.Now(), true)
}

// DecodeSharedInto is DecodeShared writing the envelope to dst (whatever
// it held is dropped) and the record's counterparty, if it has one, to cp
// (dst.Counterparty is then cp), for a caller that decodes a whole batch
// into slices it keeps from one batch to the next: a record's counterparty
// is then no allocation of its own (96 bytes), and the envelope is not
// copied twice on its way out. A record encoding/json reads (one decodeFast
// is unsure of) gets a counterparty of its own, and cp may then hold part of
// the record: clear cp before the record's memory is reused. dst is
// unspecified on an error.
func DecodeSharedInto(dst *Envelope, cp *Counterparty, b []byte) error {
	return decodeSharedIntoAt(dst, cp, b, time.Now())
}

func decodeSharedIntoAt(dst *Envelope, cp *Counterparty, b []byte, now time.Time) error {
	if plain, ok := decodeFastTo(dst, cp, b, true); ok && dst.check(now, plain) == nil {
		return nil
	}
	var err error
	*dst, err = decodeStd(b, now)
	return err
}

func decodeAt(b []byte, now time.Time, shared bool) (Envelope, error) {
	if e, plain, ok := decodeFast(b, shared); ok && e.check(now, plain) == nil {
		return e, nil
	}
	return decodeStd(b, now)
}

// decodeStd is Decode on encoding/json alone: the path of a record
// decodeFast is unsure of, and the reference the differential suite holds
// decodeFast to.
func decodeStd(b []byte, now time.Time) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return Envelope{}, classify(b)
	}
	if err := e.sentZeroTime(b); err != nil {
		return Envelope{}, err
	}
	if err := e.check(now, false); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// sentZeroTime refuses a time the record holds that reads as time.Time's
// zero (0001-01-01T00:00:00Z, or the same instant with an offset): the
// envelope cannot tell it from an absent time, which it is not. Only a
// record with a zero time pays for the look (decodeFast sends those here).
func (e *Envelope) sentZeroTime(b []byte) error {
	if !e.OccurredAt.IsZero() && !e.ReceivedAt.IsZero() && (e.Decision == nil || !e.Decision.DecidedAt.IsZero()) {
		return nil
	}
	var probe struct {
		OccurredAt json.RawMessage `json:"occurred_at"`
		ReceivedAt json.RawMessage `json:"received_at"`
		Decision   struct {
			DecidedAt json.RawMessage `json:"decided_at"`
		} `json:"decision"`
	}
	if json.Unmarshal(b, &probe) != nil {
		return nil // check names the fault
	}
	sent := func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }
	for _, f := range []struct {
		name string
		zero bool
		raw  json.RawMessage
	}{
		{"occurred_at", e.OccurredAt.IsZero(), probe.OccurredAt},
		{"received_at", e.ReceivedAt.IsZero(), probe.ReceivedAt},
		{"decision.decided_at", e.Decision != nil && e.Decision.DecidedAt.IsZero(), probe.Decision.DecidedAt},
	} {
		if f.zero && sent(f.raw) {
			return fmt.Errorf("%w: %s %s: %s", ErrNotJSON, e.Kind, f.name, errYearOutside)
		}
	}
	return nil
}

// check is what Decode checks of a read envelope: normalize, then the
// occurred_at window from now; plain as normalize's.
func (e *Envelope) check(now time.Time, plain bool) error {
	if err := e.normalize(plain); err != nil {
		return err
	}
	if err := CheckOccurredAt(e.OccurredAt, now); err != nil {
		return fmt.Errorf("%w: %s occurred_at: %s", ErrOutOfLimits, e.Kind, err)
	}
	return nil
}

// classify turns an unmarshal failure into one of the classes. A
// record of an unknown version may legitimately have another shape, so the
// version is checked before blaming the shape. It runs only on failures, with
// encoding/json, whose error types describe() knows not to quote.
func classify(b []byte) error {
	// Nesting deeper than a JSON library goes fails it as if the bytes were
	// not JSON; said as what it is.
	var f *JSONFault
	if errors.As(CheckJSONIn(b, 1), &f) && f.Reason == ReasonTooDeep {
		return fmt.Errorf("%w: %s: %s", ErrOutOfLimits, f.Path, f.Reason)
	}
	err := json.Unmarshal(b, new(Envelope))
	if err == nil {
		// Only a decoder disagreeing with encoding/json gets here.
		err = errors.New("rejected by the decoder")
	}
	var probe struct {
		V           json.RawMessage `json:"v"`
		ID          json.RawMessage `json:"id"`
		WorkspaceID json.RawMessage `json:"workspace_id"`
	}
	if json.Unmarshal(b, &probe) != nil {
		return fmt.Errorf("%w: %s", ErrNotJSON, describe(err))
	}
	if string(probe.V) != "1" {
		return fmt.Errorf("%w: v=%.10s", ErrUnknownVersion, probe.V)
	}
	var id, ws string
	if json.Unmarshal(probe.ID, &id) != nil || id == "" {
		return fmt.Errorf("%w: id is not a UUID string", ErrMissingID)
	}
	if _, perr := ParseUUID(id); perr != nil {
		return fmt.Errorf("%w: id: %v", ErrMissingID, perr)
	}
	if json.Unmarshal(probe.WorkspaceID, &ws) != nil || ws == "" {
		return fmt.Errorf("%w: workspace_id is not a UUID string", ErrMissingWorkspace)
	}
	if _, perr := ParseUUID(ws); perr != nil {
		return fmt.Errorf("%w: workspace_id: %v", ErrMissingWorkspace, perr)
	}
	return fmt.Errorf("%w: %s", ErrNotJSON, describe(err))
}

// describe names where the JSON went wrong without quoting the offending
// value: encoding/json's messages are built from the field path, the Go type
// and an offset, which say enough to find the fault.
func describe(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at offset %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s: JSON %s where %s was expected", typ.Field, typ.Value, typ.Type)
	}
	return "cannot unmarshal"
}
