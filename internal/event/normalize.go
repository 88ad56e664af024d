package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The checks Encode and Decode apply to an envelope and its canonical form.

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
	if e.Kind != KindTransaction && e.Kind != KindAccountEvent {
		return fmt.Errorf("%w: unknown kind (want transaction or account_event)", ErrNotJSON)
	}
	if e.ExternalID == "" {
		return e.invalid("external_id", "missing")
	}
	if err := checkExternalID(e.ExternalID, plain); err != nil {
		return e.outOfLimits("external_id", err)
	}
	var err error
	if e.OccurredAt, err = canonicalTime(e.OccurredAt, true); err != nil {
		return e.invalid("occurred_at", err.Error())
	}
	if e.ReceivedAt, err = canonicalTime(e.ReceivedAt, false); err != nil {
		return e.invalid("received_at", err.Error())
	}
	if err := e.normalizeObjects(); err != nil {
		return err
	}
	// Text fields either kind may carry; empty means absent.
	if name, err := checkTexts(plain, []textField{
		{"type", e.Type, MaxLabelBytes}, {"status", e.Status, MaxLabelBytes},
		{"channel", e.Channel, MaxLabelBytes}, {"reference", e.Reference, MaxReferenceBytes},
	}); err != nil {
		return e.outOfLimits(name, err)
	}
	if e.CustomerExternalID != "" {
		if err := checkExternalID(e.CustomerExternalID, plain); err != nil {
			return e.outOfLimits("customer_external_id", err)
		}
	}
	if e.AccountExternalID != "" {
		if err := checkExternalID(e.AccountExternalID, plain); err != nil {
			return e.outOfLimits("account_external_id", err)
		}
	}

	switch e.Kind {
	case KindTransaction:
		return e.normalizeTransaction(plain)
	case KindAccountEvent:
		if e.CustomerExternalID == "" {
			return e.invalid("customer_external_id", "missing")
		}
		if e.Type == "" {
			return e.invalid("type", "missing")
		}
	}
	return nil
}

// normalizeObjects puts metadata and attributes in canonical form and
// checks them as jsonb will read them.
func (e *Envelope) normalizeObjects() error {
	var err error
	if e.Metadata, err = canonicalObject(e.Metadata); err != nil {
		return e.invalid("metadata", err.Error())
	}
	if e.Metadata != nil {
		// As jsonb will read it (jsonb.go): no \u0000, numbers numeric
		// holds, no duplicate key, bounded size and depth.
		if err := CheckJSONB(e.Metadata); err != nil {
			return e.outOfLimits("metadata", err)
		}
	}
	if e.Attributes, err = canonicalObject(e.Attributes); err != nil {
		return e.invalid("attributes", err.Error())
	}
	if e.Attributes != nil {
		if err := CheckJSONB(e.Attributes); err != nil {
			return e.outOfLimits("attributes", err)
		}
	}
	return nil
}

// normalizeTransaction is normalize's part for a transaction's fields.
func (e *Envelope) normalizeTransaction(plain bool) error {
	if e.AccountExternalID == "" {
		return e.invalid("account_external_id", "missing")
	}
	if !validDecimal(e.Amount) {
		return e.invalid("amount", "want a decimal string such as \"1234.50\"")
	}
	if err := CheckAmount(e.Amount); err != nil {
		return e.outOfLimits("amount", err)
	}
	if !validCurrency(e.Currency) {
		return e.invalid("currency", "want an ISO 4217 code such as \"EUR\"")
	}
	if !IsCurrency(e.Currency) {
		return e.outOfLimits("currency", errors.New("not an active ISO 4217 code"))
	}
	if e.Direction != DirectionIn && e.Direction != DirectionOut {
		return e.invalid("direction", "want in or out")
	}
	if c := e.Counterparty; c != nil {
		if err := c.check(plain); err != nil {
			return fmt.Errorf("%w: %s counterparty.%s", ErrOutOfLimits, e.Kind, err)
		}
	}
	if d := e.Decision; d != nil {
		return e.normalizeDecision(d, plain)
	}
	return nil
}

// normalizeDecision is normalize's part for a transaction's decision.
func (e *Envelope) normalizeDecision(d *Decision, plain bool) error {
	var err error
	if d.Outcome != OutcomeApprove && d.Outcome != OutcomeReview && d.Outcome != OutcomeDecline {
		return e.invalid("decision.outcome", "want approve, review or decline")
	}
	if d.DecidedAt, err = canonicalTime(d.DecidedAt, false); err != nil {
		return e.invalid("decision.decided_at", err.Error())
	}
	if !(d.Score > -DecisionScoreLimit && d.Score < DecisionScoreLimit) {
		return e.outOfLimits("decision.score", fmt.Errorf("want a number between -%g and %g, exclusive", DecisionScoreLimit, DecisionScoreLimit))
	}
	if len(d.Reasons) > MaxDecisionReasons {
		return e.outOfLimits("decision.reasons", fmt.Errorf("%d reasons, at most %d", len(d.Reasons), MaxDecisionReasons))
	}
	for _, r := range d.Reasons {
		if err := checkText(r, MaxNameBytes, plain); err != nil {
			return e.outOfLimits("decision.reasons", err)
		}
	}
	if len(d.Reasons) == 0 {
		d.Reasons = nil
	}
	if len(d.RuleIDs) > MaxDecisionReasons {
		return e.outOfLimits("decision.rule_ids", fmt.Errorf("%d rules, at most %d", len(d.RuleIDs), MaxDecisionReasons))
	}
	if len(d.RuleIDs) == 0 {
		d.RuleIDs = nil
	}
	if d.LatencyMS < 0 {
		return e.invalid("decision.latency_ms", "negative")
	}
	return nil
}

// invalid is the error of a field that is missing or not of its form.
func (e *Envelope) invalid(field, reason string) error {
	return fmt.Errorf("%w: %s %s: %s", ErrNotJSON, e.Kind, field, reason)
}

// outOfLimits is the error of a field outside its limits.
func (e *Envelope) outOfLimits(field string, err error) error {
	return fmt.Errorf("%w: %s %s: %s", ErrOutOfLimits, e.Kind, field, err)
}

// check checks a counterparty's fields; the error names the field first
// ("name: 300 bytes, at most 256"). plain as normalize's.
func (c *Counterparty) check(plain bool) error {
	if name, err := checkTexts(plain, []textField{
		{"name", c.Name, MaxNameBytes},
		{"identifier_kind", c.IdentifierKind, MaxLabelBytes},
		{"identifier_enc", c.IdentifierEnc, MaxProtectedIdentifierBytes},
		{"identifier_masked", c.IdentifierMasked, MaxMaskedIdentifierBytes},
		{"identifier_fp", c.IdentifierFP, MaxFingerprintBytes},
		{"fingerprint", c.Fingerprint, MaxFingerprintBytes},
	}); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if c.IdentifierKind != "" && !slices.Contains(IdentifierKinds, c.IdentifierKind) {
		return fmt.Errorf("identifier_kind: want one of %s", strings.Join(IdentifierKinds, ", "))
	}
	return nil
}

// textField is a text field to check: its name, its value, its limit.
type textField struct {
	name  string
	value string
	max   int
}

// checkTexts checks each field with checkText, and names the first that
// fails.
func checkTexts(plain bool, fields []textField) (string, error) {
	for _, f := range fields {
		if err := checkText(f.value, f.max, plain); err != nil {
			return f.name, err
		}
	}
	return "", nil
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
