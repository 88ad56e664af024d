package event

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"
)

// Encode writes an envelope after checking it as Decode would, so a producer
// can never put a record on Kafka that the persister will dead-letter, with
// one exception: the occurred_at window depends on the reader's clock, so
// only Decode checks it (the ingest API checks its narrower AcceptWindow).
// It sets V to Version when zero. The bytes are AppendRecord's.
func Encode(e Envelope) ([]byte, error) {
	if e.V == 0 {
		e.V = Version
	}
	if err := e.normalize(false); err != nil {
		return nil, fmt.Errorf("encoding event: %w", err)
	}
	return AppendRecord(make([]byte, 0, recordSizeHint(&e)), &e), nil
}

// recordSizeHint is a little over the length of e's record, so Encode
// allocates once: every key, the IDs and times, the texts, the objects
// (text needing escapes may still grow it).
func recordSizeHint(e *Envelope) int {
	n := 400 + len(e.Kind) + len(e.ExternalID) + len(e.CustomerExternalID) + len(e.AccountExternalID) +
		len(e.Type) + len(e.Amount) + len(e.Currency) + len(e.Direction) + len(e.Status) + len(e.Reference) +
		len(e.Channel) + len(e.Metadata) + len(e.Attributes)
	if c := e.Counterparty; c != nil {
		n += 120 + len(c.Name) + len(c.IdentifierKind) + len(c.IdentifierEnc) + len(c.IdentifierMasked) +
			len(c.IdentifierFP) + len(c.Fingerprint)
	}
	if d := e.Decision; d != nil {
		n += 160 + 39*len(d.RuleIDs)
		for _, r := range d.Reasons {
			n += len(r) + 3
		}
	}
	return n
}

// AppendRecord appends the record of an envelope in its canonical form (one
// Encode or Decode checked, or one built under checks at least as strict as
// Encode's, as the ingest API's field reader does) to dst: exactly the bytes
// encoding/json writes for it without HTML escaping (the differential suite,
// codec_differential_test.go, holds it to that), written straight from the
// fields in one pass instead of through a reflection-driven encoder. HTML
// escaping would rewrite "<" in names and metadata as \u003c, so a
// decoded-then-encoded record would differ from what the client sent.
func AppendRecord(dst []byte, e *Envelope) []byte {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(e.V), 10)
	dst = append(dst, `,"kind":`...)
	dst = AppendJSONString(dst, string(e.Kind), false)
	dst = append(dst, `,"id":`...)
	dst = appendUUID(dst, e.ID)
	dst = append(dst, `,"workspace_id":`...)
	dst = appendUUID(dst, e.WorkspaceID)
	dst = append(dst, `,"external_id":`...)
	dst = AppendJSONString(dst, e.ExternalID, false)
	dst = append(dst, `,"occurred_at":`...)
	dst = appendTime(dst, e.OccurredAt)
	if !e.ReceivedAt.IsZero() {
		dst = append(dst, `,"received_at":`...)
		dst = appendTime(dst, e.ReceivedAt)
	}
	dst = appendOptional(dst, `,"customer_external_id":`, e.CustomerExternalID)
	dst = appendOptional(dst, `,"account_external_id":`, e.AccountExternalID)
	dst = appendOptional(dst, `,"type":`, e.Type)
	dst = appendOptional(dst, `,"amount":`, e.Amount)
	dst = appendOptional(dst, `,"currency":`, e.Currency)
	dst = appendOptional(dst, `,"direction":`, string(e.Direction))
	dst = appendOptional(dst, `,"status":`, e.Status)
	dst = appendOptional(dst, `,"reference":`, e.Reference)
	dst = appendOptional(dst, `,"channel":`, e.Channel)
	if c := e.Counterparty; c != nil {
		dst = appendCounterparty(dst, c)
	}
	dst = appendObject(dst, `,"metadata":`, e.Metadata)
	if d := e.Decision; d != nil {
		dst = appendDecision(dst, d)
	}
	dst = appendObject(dst, `,"attributes":`, e.Attributes)
	return append(dst, '}')
}

func appendCounterparty(dst []byte, c *Counterparty) []byte {
	dst = append(dst, `,"counterparty":{`...)
	mark := len(dst)
	dst = appendMember(dst, mark, `"name":`, c.Name)
	dst = appendMember(dst, mark, `"identifier_kind":`, c.IdentifierKind)
	// The ciphertext and the fingerprints are the identity package's (a
	// key id, ':' and base64; hex) when they are plain: copied, not
	// escaped byte by byte (a third of a record's text).
	dst = appendPlainMember(dst, mark, `"identifier_enc":`, c.IdentifierEnc)
	dst = appendMember(dst, mark, `"identifier_masked":`, c.IdentifierMasked)
	dst = appendPlainMember(dst, mark, `"identifier_fp":`, c.IdentifierFP)
	dst = appendPlainMember(dst, mark, `"fingerprint":`, c.Fingerprint)
	return append(dst, '}')
}

func appendDecision(dst []byte, d *Decision) []byte {
	dst = append(dst, `,"decision":{"outcome":`...)
	dst = AppendJSONString(dst, string(d.Outcome), false)
	dst = append(dst, `,"score":`...)
	dst = appendFloat(dst, d.Score)
	if len(d.Reasons) > 0 {
		dst = appendList(append(dst, `,"reasons":`...), d.Reasons, appendRecordString)
	}
	if !d.DecidedAt.IsZero() {
		dst = append(dst, `,"decided_at":`...)
		dst = appendTime(dst, d.DecidedAt)
	}
	if len(d.RuleIDs) > 0 {
		dst = appendList(append(dst, `,"rule_ids":`...), d.RuleIDs, appendUUID)
	}
	if d.LatencyMS != 0 {
		dst = strconv.AppendInt(append(dst, `,"latency_ms":`...), int64(d.LatencyMS), 10)
	}
	if d.Degraded {
		dst = append(dst, `,"degraded":true`...)
	}
	return append(dst, '}')
}

// appendList appends items as a JSON array, each by appendItem.
func appendList[T any](dst []byte, items []T, appendItem func([]byte, T) []byte) []byte {
	dst = append(dst, '[')
	for i, it := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendItem(dst, it)
	}
	return append(dst, ']')
}

// appendRecordString is AppendJSONString as a record writes it.
func appendRecordString(dst []byte, s string) []byte { return AppendJSONString(dst, s, false) }

// appendFloat appends a finite float64 as encoding/json does: the shortest
// decimal that reads back, in exponent form below 1e-6 and from 1e21 on,
// with a one-digit negative exponent unpadded (1e-7, not 1e-07).
func appendFloat(dst []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if n := len(dst); format == 'e' && n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
		dst[n-2] = dst[n-1]
		dst = dst[:n-1]
	}
	return dst
}

// appendOptional appends `name value` unless value is empty (omitempty).
func appendOptional(dst []byte, name, value string) []byte {
	if value == "" {
		return dst
	}
	return AppendJSONString(append(dst, name...), value, false)
}

// appendMember is appendOptional inside an object opened at mark: a comma
// before every member but the first.
func appendMember(dst []byte, mark int, name, value string) []byte {
	if value == "" {
		return dst
	}
	if len(dst) > mark {
		dst = append(dst, ',')
	}
	return AppendJSONString(append(dst, name...), value, false)
}

// appendPlainMember is appendMember for a value that usually has nothing to
// escape (what the identity package made: a key id of letters, digits, '-'
// and '_', ':' and standard base64, or hex), copied as it is once
// needsNoEscape says so, eight bytes at a time.
func appendPlainMember(dst []byte, mark int, name, value string) []byte {
	if value == "" {
		return dst
	}
	if !needsNoEscape(value) {
		return appendMember(dst, mark, name, value)
	}
	if len(dst) > mark {
		dst = append(dst, ',')
	}
	dst = append(append(dst, name...), '"')
	dst = append(dst, value...)
	return append(dst, '"')
}

// needsNoEscape reports whether s is ASCII without '"', '\\', a control
// character or DEL, which JSON (without HTML escaping) writes as it is.
func needsNoEscape(s string) bool {
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	j := 0
	for ; j+8 <= len(b); j += 8 {
		if special8(binary.LittleEndian.Uint64(b[j:])) {
			return false
		}
	}
	for ; j < len(b); j++ {
		if c := b[j]; c == '"' || c == '\\' || c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// appendObject appends a metadata or attributes object, compact as
// encoding/json writes a json.RawMessage (canonicalObject compacted it).
func appendObject(dst []byte, name string, raw []byte) []byte {
	if len(raw) == 0 {
		return dst
	}
	dst = append(dst, name...)
	if !needsCompact(raw) {
		return append(dst, raw...)
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	_ = json.Compact(&buf, raw) // canonicalObject's: valid JSON
	return append(dst, buf.Bytes()...)
}

// appendUUID appends a UUID as its quoted text.
func appendUUID(dst []byte, u UUID) []byte {
	return append(AppendUUIDText(append(dst, '"'), u), '"')
}

// AppendUUIDText appends a UUID's text (UUID.String's, without its two
// allocations).
func AppendUUIDText(dst []byte, u UUID) []byte {
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[b>>4], hexDigits[b&0xF])
	}
	return dst
}

// appendTime appends a time as encoding/json does (RFC 3339 with
// nanoseconds, trailing zeros dropped), in UTC to the microsecond as
// canonicalTime makes it.
func appendTime(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.UTC().Truncate(time.Microsecond).AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s quoted as encoding/json writes a string: '"',
// '\\' and control characters escaped (\b \f \n \r \t by name), invalid
// UTF-8 as \ufffd, U+2028 and U+2029 as \u2028 and \u2029, and with
// escapeHTML '<', '>' and '&' as \u003c, \u003e and \u0026 (json.Marshal's
// answers; a record is written without).
func AppendJSONString(dst []byte, s string, escapeHTML bool) []byte {
	dst = append(dst, '"')
	if !escapeHTML && needsNoEscape(s) {
		return append(append(dst, s...), '"')
	}
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && !(escapeHTML && (b == '<' || b == '>' || b == '&')) {
				i++
				continue
			}
			dst = appendEscapedByte(append(dst, s[start:i]...), b)
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(append(dst, s[start:i]...), `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(append(dst, s[start:i]...), '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendEscapedByte appends the escape of an ASCII byte JSON escapes.
func appendEscapedByte(dst []byte, b byte) []byte {
	switch b {
	case '\\', '"':
		return append(dst, '\\', b)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
}
