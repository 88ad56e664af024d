package event

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// The limits of what an event may hold: the ONE definition, used by the
// ingest and decision APIs (to refuse an item or a decision, through their
// one request parser), by Decode (to dead-let a record another
// producer wrote) and by the load generator (which writes through Encode).
// Each is what the API documents and what the table holds: a record inside
// them is one PostgreSQL stores, so a record the database would refuse
// (a value too long for a B-tree index entry, SQLSTATE 54000; a NUL in
// text, 22021; an amount numeric(20,4) cannot hold, 22003) is caught
// before it reaches a batch.
//
// Lengths are in bytes of UTF-8, what the API counts and the index limit
// (a B-tree entry of at most ~2,700 bytes) is measured in.
const (
	// MaxExternalIDBytes bounds external_id, customer_external_id and
	// account_external_id: each is in a (workspace_id, external_id) index.
	MaxExternalIDBytes = 128
	// MaxNameBytes bounds counterparty.name, and each decision reason.
	MaxNameBytes = 256
	// MaxReferenceBytes bounds a transaction's reference.
	MaxReferenceBytes = 512
	// MaxLabelBytes bounds the short labels: type, status, channel,
	// identifier_kind, currency and country as sent, and time strings.
	MaxLabelBytes = 64
	// MaxIdentifierBytes bounds a clear identifier (IBAN, account number,
	// phone) as the API receives it; an envelope never carries one.
	MaxIdentifierBytes = 64
	// MaxProtectedIdentifierBytes bounds identifier_enc ("<key-id>:" and the
	// base64 AES-GCM sealing of an identifier of MaxIdentifierBytes, with
	// room for a longer key ID and bound data).
	MaxProtectedIdentifierBytes = 512
	// MaxMaskedIdentifierBytes bounds identifier_masked.
	MaxMaskedIdentifierBytes = 128
	// MaxFingerprintBytes bounds identifier_fp and fingerprint (hex
	// HMAC-SHA256 is 64; the rest is room for a key-version prefix). The
	// fingerprint is in the (workspace_id, fingerprint) index.
	MaxFingerprintBytes = 128
	// MaxObjectBytes bounds metadata and attributes, compact JSON.
	MaxObjectBytes = 16 << 10
	// MaxDecisionReasons bounds a decision's reasons (stored joined by ",").
	MaxDecisionReasons = 64
)

// An amount is a non-negative decimal string that numeric(20,4) holds
// exactly: at most AmountMaxIntegerDigits digits before the point and
// AmountMaxScale after it. It is never negative: direction says which way
// the money moved (the column has CHECK (amount >= 0)).
const (
	AmountMaxIntegerDigits = 16
	AmountMaxScale         = 4
)

// DecisionScoreLimit is the exclusive bound of a decision's score:
// numeric(9,4) holds |score| < 10^5.
const DecisionScoreLimit = 1e5

// The enum values. Kinds, directions and outcomes are also the Kind,
// Direction and Outcome constants; IdentifierKinds are package identity's
// kinds (its test checks they agree).
var (
	Kinds           = []Kind{KindTransaction, KindAccountEvent}
	Directions      = []Direction{DirectionIn, DirectionOut}
	Outcomes        = []Outcome{OutcomeApprove, OutcomeReview, OutcomeDecline}
	IdentifierKinds = []string{"iban", "account_number", "phone"}
)

// IsCurrency reports whether s is an active ISO 4217 code (funds and
// precious metals included; XTS, testing, and XXX, no currency, left out).
func IsCurrency(s string) bool { return currencies[s] }

var currencies = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range strings.Fields(`AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB
		BOV BRL BSD BTN BWP BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUC CUP CVE CZK DJF DKK DOP
		DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HRK HTG HUF IDR ILS INR IQD IRR
		ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT
		MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON
		RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY
		TTD TWD TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XAG XAU XBA XBB XBC XBD XCD XCG
		XDR XOF XPD XPF XPT XSU XUA YER ZAR ZMW ZWG ZWL`) {
		m[c] = true
	}
	return m
}()

// CheckText checks a text field's value: valid UTF-8 (else ReasonNotUTF8), no control
// characters (PostgreSQL's text refuses NUL; the others are a client bug),
// at most max bytes. The message never quotes the value.
func CheckText(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%d bytes, at most %d", len(s), max)
	}
	// ASCII, as nearly every field is, is checked byte by byte; the
	// first byte beyond it sends the rest through the rune-wise check.
	// About a dozen fields per record are checked.
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			if !utf8.ValidString(s[i:]) {
				return errNotUTF8
			}
			if strings.ContainsFunc(s[i:], func(c rune) bool { return c < 0x20 || c == 0x7f }) {
				return errControlCharacters
			}
			return nil
		}
		if c < 0x20 || c == 0x7f {
			return errControlCharacters
		}
	}
	return nil
}

var (
	errControlCharacters = errors.New("contains control characters")
	errNotUTF8           = errors.New(ReasonNotUTF8)
)

// CheckExternalID checks an external ID (the event's, its customer's or
// its account's): CheckText, and not empty or only whitespace.
func CheckExternalID(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("required, must not be empty or only whitespace")
	}
	return CheckText(s, MaxExternalIDBytes)
}

// CheckAmount checks a decimal amount string against the limits above.
func CheckAmount(s string) error {
	intPart, frac, hasDot := strings.Cut(s, ".")
	switch {
	case strings.HasPrefix(s, "-"):
		return errors.New("must not be negative (direction says which way money moved)")
	case !allDigits(intPart) || (hasDot && !allDigits(frac)):
		return errors.New(`want a decimal string such as "1249.90"`)
	case len(intPart) > AmountMaxIntegerDigits:
		return fmt.Errorf("more than %d digits before the decimal point", AmountMaxIntegerDigits)
	case len(frac) > AmountMaxScale:
		return fmt.Errorf("more than %d decimal places", AmountMaxScale)
	}
	return nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// The monthly partitions of transactions and account_events the worker
// keeps (internal/dbmigrate.EnsurePartitions): from the month before now's
// to PartitionMonthsAhead months after it. There is no default partition, so
// a row outside the months that exist waits (the persister retries it) until
// its partition is created.
const (
	PartitionMonthsBehind = 1
	PartitionMonthsAhead  = 3
)

// PartitionMonths returns the first day (UTC) of the oldest month kept at
// now and the end of the last month the worker creates (exclusive).
func PartitionMonths(now time.Time) (first, end time.Time) {
	u := now.UTC()
	first = time.Date(u.Year(), u.Month()-PartitionMonthsBehind, 1, 0, 0, 0, 0, time.UTC)
	end = time.Date(u.Year(), u.Month()+PartitionMonthsAhead+1, 1, 0, 0, 0, 0, time.UTC)
	return first, end
}

// The occurred_at windows. FutureSkew is how far ahead of its clock the
// ingest API accepts an occurred_at (clocks differ, but a transaction dated
// next year is a client bug).
//
// Decode's window is wider than the API's by two documented margins, so
// that nothing the API accepted is dead-lettered later:
//   - DecodeLagMargin: a record may sit on Kafka before it is read (the
//     broker's default retention is 7 days), and the oldest month kept moves
//     on the 1st; the window starts at the oldest month kept as of
//     DecodeLagMargin ago. Such a month's partition was created while it
//     was in the window (the worker creates them ahead) and is never
//     dropped.
//   - DecodeClockMargin: the worker's clock may run ahead of the reader's, or
//     it may already have created next month's partitions at a month's end;
//     the window ends at the end of the last month the worker creates as of
//     DecodeClockMargin from now.
//
// A record outside it is one no partition will hold for months or ever
// (1970, 2100): it is undecodable and goes to the dead-letter topic with the
// reason. Inside it, a missing partition still waits: the persister holds
// the batch until a worker creates the partition (docs/persister.md).
const (
	FutureSkew        = 24 * time.Hour
	DecodeLagMargin   = 7 * 24 * time.Hour
	DecodeClockMargin = 24 * time.Hour
)

// AcceptWindow is the occurred_at the ingest API accepts at now: from the
// first day of the oldest month kept to FutureSkew ahead of now, inclusive.
func AcceptWindow(now time.Time) (from, until time.Time) {
	from, _ = PartitionMonths(now)
	return from, now.Add(FutureSkew)
}

// DecodeWindow is the occurred_at Decode accepts at now: from (inclusive) to
// until (exclusive); see the margins above.
func DecodeWindow(now time.Time) (from, until time.Time) {
	from, _ = PartitionMonths(now.Add(-DecodeLagMargin))
	_, until = PartitionMonths(now.Add(DecodeClockMargin))
	return from, until
}

// CheckOccurredAt checks t against DecodeWindow(now); the message names the
// bound, never t.
func CheckOccurredAt(t, now time.Time) error {
	from, until := decodeWindowCached(now)
	switch {
	case t.Before(from):
		return fmt.Errorf("before %s, the oldest month kept: no partition will ever hold it", from.Format(time.DateOnly))
	case !t.Before(until):
		return fmt.Errorf("from %s on, beyond the months the worker creates partitions for", until.Format(time.DateOnly))
	}
	return nil
}

// windowSpan is one DecodeWindow and the clocks [lo, hi) it holds for: the
// window moves only when now - DecodeLagMargin or now + DecodeClockMargin
// enters another month.
type windowSpan struct{ lo, hi, from, until time.Time }

// lastWindow is the window of the last clock CheckOccurredAt was asked
// about: Decode checks every record against the clock, and working the
// window out again (four time.Date calls) every time costs 2 % of the
// persister's CPU.
var lastWindow atomic.Pointer[windowSpan]

// decodeWindowCached is DecodeWindow(now), exactly, from lastWindow while
// now is inside its span.
func decodeWindowCached(now time.Time) (from, until time.Time) {
	if w := lastWindow.Load(); w != nil && !now.Before(w.lo) && now.Before(w.hi) {
		return w.from, w.until
	}
	from, until = DecodeWindow(now)
	// from depends on the month of now - DecodeLagMargin, until on that of
	// now + DecodeClockMargin (UTC, as PartitionMonths reads them).
	lag, ahead := now.UTC().Add(-DecodeLagMargin), now.UTC().Add(DecodeClockMargin)
	lagMonth := time.Date(lag.Year(), lag.Month(), 1, 0, 0, 0, 0, time.UTC)
	aheadMonth := time.Date(ahead.Year(), ahead.Month(), 1, 0, 0, 0, 0, time.UTC)
	w := &windowSpan{from: from, until: until}
	w.lo = lagMonth.Add(DecodeLagMargin)
	if l := aheadMonth.Add(-DecodeClockMargin); l.After(w.lo) {
		w.lo = l
	}
	w.hi = lagMonth.AddDate(0, 1, 0).Add(DecodeLagMargin)
	if h := aheadMonth.AddDate(0, 1, 0).Add(-DecodeClockMargin); h.Before(w.hi) {
		w.hi = h
	}
	lastWindow.Store(w)
	return from, until
}
