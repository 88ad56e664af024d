package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
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
// The JSON library was chosen by benchmark (jsonbench_test.go, build tag
// jsonbench): on Go 1.26 github.com/goccy/go-json decodes a realistic
// transaction about 3× faster than encoding/json with fewer allocations, and
// agreed with encoding/json on every input of a differential fuzz (values
// and errors alike, invalid UTF-8 and deep nesting included). Only decoding
// uses it; Encode and error descriptions stay on encoding/json, and FuzzDecode
// checks the two agree through a round trip. Re-run the comparison when Go
// makes encoding/json/v2 the default: v1 then runs on v2 and most of the gap
// closes.
//
// A record in the shape Encode writes is read by decodeFast first, and by
// the library only when decodeFast is unsure of it or it fails a check.
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
// copied twice on its way out. A record the JSON library reads (one decodeFast is
// unsure of) gets a counterparty of its own, and cp may then hold part of
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
	*dst, err = decodeWith(b, gojson.Unmarshal, now)
	return err
}

func decodeAt(b []byte, now time.Time, shared bool) (Envelope, error) {
	if e, plain, ok := decodeFast(b, shared); ok && e.check(now, plain) == nil {
		return e, nil
	}
	return decodeWith(b, gojson.Unmarshal, now)
}

// decodeWith is Decode with the JSON library as a parameter, so the
// jsonbench comparison measures exactly Decode's work with each candidate.
func decodeWith(b []byte, unmarshal func([]byte, any) error, now time.Time) (Envelope, error) {
	var e Envelope
	if err := unmarshal(b, &e); err != nil {
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

// Encode writes an envelope after checking it as Decode would, so a producer
// can never put a record on Kafka that the persister will dead-letter, with
// one exception: the occurred_at window depends on the reader's clock, so
// only Decode checks it (the ingest API checks its narrower AcceptWindow).
// It sets V to Version when zero.
func Encode(e Envelope) ([]byte, error) {
	if e.V == 0 {
		e.V = Version
	}
	if err := e.normalize(false); err != nil {
		return nil, fmt.Errorf("encoding event: %w", err)
	}
	// goccy/go-json, as Decode: the same bytes as encoding/json, in about a
	// third of the time. HTML escaping would rewrite "<" in names and
	// metadata as \u003c, so a decoded-then-encoded record would differ from
	// what the client sent.
	b, err := gojson.MarshalWithOption(&e, gojson.DisableHTMLEscape())
	if err != nil {
		return nil, fmt.Errorf("encoding event %s: %w", e.ID, err)
	}
	return b, nil
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

// normalize checks what the persister and the database rely on, every
// limit of limits.go but the occurred_at window included, and puts the
// envelope in its canonical form (UTC times, compact JSON objects, no empty
// slices). plain says every text field is known to be valid UTF-8 without
// control characters (the fast scanner saw every string of the record),
// which leaves CheckText only the lengths to check.
func (e *Envelope) normalize(plain bool) error {
	if e.V != Version {
		return fmt.Errorf("%w: v=%d", ErrUnknownVersion, e.V)
	}
	if e.ID.IsZero() {
		return ErrMissingID
	}
	if e.WorkspaceID.IsZero() {
		return ErrMissingWorkspace
	}
	invalid := func(field, reason string) error {
		return fmt.Errorf("%w: %s %s: %s", ErrNotJSON, e.Kind, field, reason)
	}
	outOfLimits := func(field string, err error) error {
		return fmt.Errorf("%w: %s %s: %s", ErrOutOfLimits, e.Kind, field, err)
	}
	if e.Kind != KindTransaction && e.Kind != KindAccountEvent {
		return fmt.Errorf("%w: unknown kind (want transaction or account_event)", ErrNotJSON)
	}
	if e.ExternalID == "" {
		return invalid("external_id", "missing")
	}
	if err := checkExternalID(e.ExternalID, plain); err != nil {
		return outOfLimits("external_id", err)
	}
	var err error
	if e.OccurredAt, err = canonicalTime(e.OccurredAt, true); err != nil {
		return invalid("occurred_at", err.Error())
	}
	if e.ReceivedAt, err = canonicalTime(e.ReceivedAt, false); err != nil {
		return invalid("received_at", err.Error())
	}
	if e.Metadata, err = canonicalObject(e.Metadata); err != nil {
		return invalid("metadata", err.Error())
	}
	if e.Metadata != nil {
		// As jsonb will read it (jsonb.go): no \u0000, numbers numeric
		// holds, no duplicate key, bounded size and depth.
		if err := CheckJSONB(e.Metadata); err != nil {
			return outOfLimits("metadata", err)
		}
	}
	if e.Attributes, err = canonicalObject(e.Attributes); err != nil {
		return invalid("attributes", err.Error())
	}
	if e.Attributes != nil {
		if err := CheckJSONB(e.Attributes); err != nil {
			return outOfLimits("attributes", err)
		}
	}
	// Text fields either kind may carry; empty means absent.
	for _, f := range [...]struct {
		name  string
		value string
		max   int
	}{
		{"type", e.Type, MaxLabelBytes},
		{"status", e.Status, MaxLabelBytes},
		{"channel", e.Channel, MaxLabelBytes},
		{"reference", e.Reference, MaxReferenceBytes},
	} {
		if err := checkText(f.value, f.max, plain); err != nil {
			return outOfLimits(f.name, err)
		}
	}
	if e.CustomerExternalID != "" {
		if err := checkExternalID(e.CustomerExternalID, plain); err != nil {
			return outOfLimits("customer_external_id", err)
		}
	}
	if e.AccountExternalID != "" {
		if err := checkExternalID(e.AccountExternalID, plain); err != nil {
			return outOfLimits("account_external_id", err)
		}
	}

	switch e.Kind {
	case KindTransaction:
		if e.AccountExternalID == "" {
			return invalid("account_external_id", "missing")
		}
		if !validDecimal(e.Amount) {
			return invalid("amount", "want a decimal string such as \"1234.50\"")
		}
		if err := CheckAmount(e.Amount); err != nil {
			return outOfLimits("amount", err)
		}
		if !validCurrency(e.Currency) {
			return invalid("currency", "want an ISO 4217 code such as \"EUR\"")
		}
		if !IsCurrency(e.Currency) {
			return outOfLimits("currency", errors.New("not an active ISO 4217 code"))
		}
		if e.Direction != DirectionIn && e.Direction != DirectionOut {
			return invalid("direction", "want in or out")
		}
		if c := e.Counterparty; c != nil {
			if err := c.check(plain); err != nil {
				return fmt.Errorf("%w: %s counterparty.%s", ErrOutOfLimits, e.Kind, err)
			}
		}
		if d := e.Decision; d != nil {
			if d.Outcome != OutcomeApprove && d.Outcome != OutcomeReview && d.Outcome != OutcomeDecline {
				return invalid("decision.outcome", "want approve, review or decline")
			}
			if d.DecidedAt, err = canonicalTime(d.DecidedAt, false); err != nil {
				return invalid("decision.decided_at", err.Error())
			}
			if !(d.Score > -DecisionScoreLimit && d.Score < DecisionScoreLimit) {
				return outOfLimits("decision.score", fmt.Errorf("want a number between -%g and %g, exclusive", DecisionScoreLimit, DecisionScoreLimit))
			}
			if len(d.Reasons) > MaxDecisionReasons {
				return outOfLimits("decision.reasons", fmt.Errorf("%d reasons, at most %d", len(d.Reasons), MaxDecisionReasons))
			}
			for _, r := range d.Reasons {
				if err := checkText(r, MaxNameBytes, plain); err != nil {
					return outOfLimits("decision.reasons", err)
				}
			}
			if len(d.Reasons) == 0 {
				d.Reasons = nil
			}
			if len(d.RuleIDs) > MaxDecisionReasons {
				return outOfLimits("decision.rule_ids", fmt.Errorf("%d rules, at most %d", len(d.RuleIDs), MaxDecisionReasons))
			}
			if len(d.RuleIDs) == 0 {
				d.RuleIDs = nil
			}
			if d.LatencyMS < 0 {
				return invalid("decision.latency_ms", "negative")
			}
		}
	case KindAccountEvent:
		if e.CustomerExternalID == "" {
			return invalid("customer_external_id", "missing")
		}
		if e.Type == "" {
			return invalid("type", "missing")
		}
	}
	return nil
}

// check checks a counterparty's fields; the error names the field first
// ("name: 300 bytes, at most 256"). plain as normalize's.
func (c *Counterparty) check(plain bool) error {
	for _, f := range [...]struct {
		name  string
		value string
		max   int
	}{
		{"name", c.Name, MaxNameBytes},
		{"identifier_kind", c.IdentifierKind, MaxLabelBytes},
		{"identifier_enc", c.IdentifierEnc, MaxProtectedIdentifierBytes},
		{"identifier_masked", c.IdentifierMasked, MaxMaskedIdentifierBytes},
		{"identifier_fp", c.IdentifierFP, MaxFingerprintBytes},
		{"fingerprint", c.Fingerprint, MaxFingerprintBytes},
	} {
		if err := checkText(f.value, f.max, plain); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if c.IdentifierKind != "" && !slices.Contains(IdentifierKinds, c.IdentifierKind) {
		return fmt.Errorf("identifier_kind: want one of %s", strings.Join(IdentifierKinds, ", "))
	}
	return nil
}

// checkText is CheckText, which for a plain value (valid UTF-8 without
// control characters) can only fail on its length: the byte loops of a dozen fields a record
// would be 8 % of decoding one.
func checkText(s string, max int, plain bool) error {
	if plain && len(s) <= max {
		return nil
	}
	return CheckText(s, max)
}

// checkExternalID is CheckExternalID with checkText's shortcut.
func checkExternalID(s string, plain bool) error {
	if plain && len(s) <= MaxExternalIDBytes && strings.TrimSpace(s) != "" {
		return nil
	}
	return CheckExternalID(s)
}

// canonicalTime returns t in UTC, truncated to the microsecond: the
// precision PostgreSQL's timestamptz stores (pgx truncates too), and the one
// a TransactionID fixes, so an envelope's time, its ID and its stored row
// always agree. Years outside 1970..9999 are refused: the ID's time prefix
// starts at 1970 and RFC 3339 ends at 9999.
func canonicalTime(t time.Time, required bool) (time.Time, error) {
	if t.IsZero() {
		if required {
			return t, errors.New("missing")
		}
		return time.Time{}, nil
	}
	t = t.UTC().Truncate(time.Microsecond)
	if y := t.Year(); y < 1970 || y > 9999 {
		return t, errYearOutside
	}
	return t, nil
}

// errYearOutside: the ID's time prefix starts at 1970 and RFC 3339 ends at
// 9999.
var errYearOutside = errors.New("year outside 1970..9999")

// canonicalObject accepts an absent or null value (returned as nil) or a JSON
// object (returned compact); anything else is refused, because the database
// column is a jsonb object and rules address its keys.
func canonicalObject(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, errors.New("want a JSON object")
	}
	if !needsCompact(raw) {
		return raw, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if err := json.Compact(&buf, raw); err != nil {
		return nil, errors.New("invalid JSON")
	}
	return buf.Bytes(), nil
}

// needsCompact reports whether raw holds JSON whitespace (inside strings
// too, which json.Compact keeps as it is). A loop rather than
// bytes.ContainsAny, which builds its byte set anew on every call: 1 % of
// the persister's CPU for metadata of a few dozen bytes.
func needsCompact(raw []byte) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\r', '\n':
			return true
		}
	}
	return false
}

// validDecimal accepts an optional minus sign, digits, and optionally a dot
// followed by digits: what PostgreSQL's numeric reads exactly. No exponent,
// no plus sign, at most 40 characters.
func validDecimal(s string) bool {
	if len(s) == 0 || len(s) > 40 {
		return false
	}
	i := 0
	if s[0] == '-' {
		i = 1
	}
	digits, dot := 0, false
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot && digits > 0:
			dot = true
			digits = 0
		default:
			return false
		}
	}
	return digits > 0
}

func validCurrency(s string) bool {
	return len(s) == 3 && isUpper(s[0]) && isUpper(s[1]) && isUpper(s[2])
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
