package api

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/speculapro/speculapro/internal/event"
)

// appendRecord appends the Kafka record of an envelope the field reader
// built (a transaction or an account event, no decision) to dst: exactly
// the bytes event.Encode writes (encoding/json's, without HTML escaping),
// written straight from the fields in one pass instead of through a
// reflection-driven encoder. The reader's checks are event.Encode's and
// more (TestRecordIsEncodes compares the two on every kind of item), so
// nothing the persister would dead-letter is written.
func appendRecord(dst []byte, e *event.Envelope) []byte {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(e.V), 10)
	dst = append(dst, `,"kind":`...)
	dst = appendJSONString(dst, string(e.Kind))
	dst = append(dst, `,"id":`...)
	dst = appendUUID(dst, e.ID)
	dst = append(dst, `,"workspace_id":`...)
	dst = appendUUID(dst, e.WorkspaceID)
	dst = append(dst, `,"external_id":`...)
	dst = appendJSONString(dst, e.ExternalID)
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
		dst = append(dst, `,"counterparty":{`...)
		mark := len(dst)
		dst = appendMember(dst, mark, `"name":`, c.Name)
		dst = appendMember(dst, mark, `"identifier_kind":`, c.IdentifierKind)
		// The ciphertext and the fingerprints are the identity package's
		// (a key id, ':' and base64; hex): nothing in them is escaped, so
		// they are copied, not scanned byte by byte (a third of a record's
		// text).
		dst = appendPlainMember(dst, mark, `"identifier_enc":`, c.IdentifierEnc)
		dst = appendMember(dst, mark, `"identifier_masked":`, c.IdentifierMasked)
		dst = appendPlainMember(dst, mark, `"identifier_fp":`, c.IdentifierFP)
		dst = appendPlainMember(dst, mark, `"fingerprint":`, c.Fingerprint)
		dst = append(dst, '}')
	}
	dst = appendObject(dst, `,"metadata":`, e.Metadata)
	dst = appendObject(dst, `,"attributes":`, e.Attributes)
	return append(dst, '}')
}

// appendOptional appends `name value` unless value is empty (omitempty).
func appendOptional(dst []byte, name, value string) []byte {
	if value == "" {
		return dst
	}
	return appendJSONString(append(dst, name...), value)
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
	return appendJSONString(append(dst, name...), value)
}

// appendPlainMember is appendMember for a value with nothing to escape,
// copied as it is: only ever what the identity package made, a key id
// (letters, digits, '-' and '_', identity.ParseKeyring), ':' and standard
// base64, or hex (TestRecordIsEncodes compares the bytes with
// event.Encode's).
func appendPlainMember(dst []byte, mark int, name, value string) []byte {
	if value == "" {
		return dst
	}
	if len(dst) > mark {
		dst = append(dst, ',')
	}
	dst = append(append(dst, name...), '"')
	dst = append(dst, value...)
	return append(dst, '"')
}

// appendObject appends a metadata or attributes object, compact as
// encoding/json writes a json.RawMessage (the reader compacted it already).
func appendObject(dst []byte, name string, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return dst
	}
	dst = append(dst, name...)
	if !bytes.ContainsAny(raw, " \t\r\n") {
		return append(dst, raw...)
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, raw)
	return append(dst, buf.Bytes()...)
}

// appendUUID appends a UUID as its quoted text.
func appendUUID(dst []byte, u event.UUID) []byte {
	return append(appendUUIDText(append(dst, '"'), u), '"')
}

// appendUUIDText appends a UUID's text (event.UUID.String's, without its
// two allocations).
func appendUUIDText(dst []byte, u event.UUID) []byte {
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[b>>4], hexDigits[b&0xF])
	}
	return dst
}

// uuidString is u.String() in one allocation.
func uuidString(u event.UUID) string {
	var b [36]byte
	return string(appendUUIDText(b[:0], u))
}

// appendTime appends a time as encoding/json does (RFC 3339 with
// nanoseconds, trailing zeros dropped), in UTC to the microsecond as
// event.Encode canonicalises it.
func appendTime(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.UTC().Truncate(time.Microsecond).AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json does without HTML
// escaping (the record's bytes): '"', '\\' and control characters escaped
// (\b \f \n \r \t by name), invalid UTF-8 as \ufffd, U+2028 and U+2029 as
// \u2028 and \u2029.
func appendJSONString(dst []byte, s string) []byte { return appendQuoted(dst, s, false) }

// appendHTMLSafeString is appendJSONString with '<', '>' and '&' escaped
// too, as json.Marshal writes an answer.
func appendHTMLSafeString(dst []byte, s string) []byte { return appendQuoted(dst, s, true) }

func appendQuoted(dst []byte, s string, escapeHTML bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && !(escapeHTML && (b == '<' || b == '>' || b == '&')) {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
