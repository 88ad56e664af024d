package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sampleTransaction is a realistic sp.txn.ingested record as the ingest API
// writes it: protected counterparty, metadata, a real-time decision.
const sampleTransaction = `{"v":1,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab",` +
	`"workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"txn-2026-11-30-000123456",` +
	`"occurred_at":"2026-11-30T07:41:12.345Z","received_at":"2026-11-30T07:41:12.402917Z",` +
	`"account_external_id":"acc-000042","customer_external_id":"cust-000017","amount":"1249.90",` +
	`"currency":"EUR","direction":"out","type":"transfer","status":"completed",` +
	`"reference":"Invoice 2026-1187 / rent December","channel":"mobile",` +
	`"counterparty":{"name":"Hausverwaltung Müller GmbH","identifier_kind":"iban",` +
	`"identifier_enc":"k1:q83vEjRWeJq8Ad4K5bH1m2p0c3E5Zy8xVQ7kGm3s0n9wYb1dXc6T2uLrHqP4oNfA2aZ8==",` +
	`"identifier_masked":"DE89 **** **** **** 3000",` +
	`"identifier_fp":"5d41402abc4b2a76b9719d911017c592b6f0e0c9c6a1d7e4f3a2b1c0d9e8f7a6",` +
	`"fingerprint":"0c9e8f7a65d41402abc4b2a76b9719d911017c592b6f0e0c9c6a1d7e4f3a2b1d"},` +
	`"metadata":{"device_id":"a1b2c3d4","ip":"203.0.113.7","app_version":"5.12.1","merchant_category":null,"tags":["rent","standing-order"]},` +
	`"decision":{"outcome":"review","score":71.5,"reasons":["new_counterparty","amount_above_p95"],"decided_at":"2026-11-30T07:41:12.398Z"}}`

// sampleNow is the clock the samples are decoded at: their occurred_at must
// be inside the partition window (DecodeWindow).
var sampleNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const sampleAccountEvent = `{"v":1,"kind":"account_event","id":"0193f5a2-7c00-7abc-8def-0123456789ac",` +
	`"workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"ev-1",` +
	`"occurred_at":"2026-11-30T08:41:12+01:00","customer_external_id":"cust-000017",` +
	`"type":"sim_swap","attributes":{ "carrier": "T-Mobile", "new_imsi_prefix": "26201" }}`

func TestDecodeSamples(t *testing.T) {
	e, err := DecodeAt([]byte(sampleTransaction), sampleNow)
	if err != nil {
		t.Fatalf("Decode(sampleTransaction): %v", err)
	}
	if e.Kind != KindTransaction || e.Amount != "1249.90" || e.Direction != DirectionOut ||
		e.Counterparty == nil || e.Counterparty.IdentifierMasked != "DE89 **** **** **** 3000" ||
		e.Decision == nil || e.Decision.Outcome != OutcomeReview || e.Decision.Score != 71.5 ||
		e.ID.String() != "0193f5a2-7c00-7abc-8def-0123456789ab" {
		t.Errorf("decoded transaction = %+v", e)
	}
	if want := time.Date(2026, 11, 30, 7, 41, 12, 345e6, time.UTC); !e.OccurredAt.Equal(want) {
		t.Errorf("occurred_at = %v, want %v", e.OccurredAt, want)
	}

	a, err := DecodeAt([]byte(sampleAccountEvent), sampleNow)
	if err != nil {
		t.Fatalf("Decode(sampleAccountEvent): %v", err)
	}
	if a.OccurredAt.Location() != time.UTC || a.OccurredAt.Hour() != 7 {
		t.Errorf("occurred_at %v not normalised to UTC", a.OccurredAt)
	}
	if string(a.Attributes) != `{"carrier":"T-Mobile","new_imsi_prefix":"26201"}` {
		t.Errorf("attributes not compacted: %s", a.Attributes)
	}
	if a.Counterparty != nil || a.Amount != "" {
		t.Errorf("account event carries transaction fields: %+v", a)
	}
}

func TestDecodeErrors(t *testing.T) {
	// mutate returns sampleTransaction with one field replaced (or removed
	// when val is "").
	mutate := func(field, val string) string {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(sampleTransaction), &m); err != nil {
			t.Fatal(err)
		}
		if val == "" {
			delete(m, field)
		} else {
			m[field] = json.RawMessage(val)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty", "", ErrNotJSON},
		{"not json", "hello", ErrNotJSON},
		{"truncated", sampleTransaction[:100], ErrNotJSON},
		{"array", `[1,2]`, ErrNotJSON},
		{"json null", `null`, ErrUnknownVersion},
		{"no version", mutate("v", ""), ErrUnknownVersion},
		{"version 2", mutate("v", "2"), ErrUnknownVersion},
		{"version 2 other shape", `{"v":2,"id":17,"amount":12.5}`, ErrUnknownVersion},
		{"version string", mutate("v", `"1"`), ErrUnknownVersion},
		{"no id", mutate("id", ""), ErrMissingID},
		{"nil id", mutate("id", `"00000000-0000-0000-0000-000000000000"`), ErrMissingID},
		{"bad id", mutate("id", `"txn-1"`), ErrMissingID},
		{"numeric id", mutate("id", `42`), ErrMissingID},
		{"no workspace", mutate("workspace_id", ""), ErrMissingWorkspace},
		{"bad workspace", mutate("workspace_id", `"6f1c2b9e"`), ErrMissingWorkspace},
		{"float amount", mutate("amount", `1249.9`), ErrNotJSON},
		{"exponent amount", mutate("amount", `"1e3"`), ErrNotJSON},
		{"no amount", mutate("amount", ""), ErrNotJSON},
		{"bad currency", mutate("currency", `"euro"`), ErrNotJSON},
		{"bad direction", mutate("direction", `"sideways"`), ErrNotJSON},
		{"unknown kind", mutate("kind", `"refund"`), ErrNotJSON},
		{"no external id", mutate("external_id", ""), ErrNotJSON},
		{"no occurred_at", mutate("occurred_at", ""), ErrNotJSON},
		{"bad occurred_at", mutate("occurred_at", `"yesterday"`), ErrNotJSON},
		{"occurred_at before 1970", mutate("occurred_at", `"1969-12-31T23:59:59Z"`), ErrNotJSON},
		{"metadata array", mutate("metadata", `[1]`), ErrNotJSON},
		{"bad outcome", mutate("decision", `{"outcome":"maybe","score":1}`), ErrNotJSON},
		{"no account", mutate("account_external_id", ""), ErrNotJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeAt([]byte(tt.in), sampleNow)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode error = %v, want %v", err, tt.want)
			}
			if !IsUndecodable(err) {
				t.Errorf("IsUndecodable(%v) = false", err)
			}
			n := 0
			for _, s := range []error{ErrNotJSON, ErrUnknownVersion, ErrMissingID, ErrMissingWorkspace} {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("error %v matches %d classes, want exactly 1", err, n)
			}
			// Records hold names and references: errors must not quote them.
			for _, secret := range []string{"Müller", "Invoice", "1249"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q quotes the record (%s)", err, secret)
				}
			}
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, in := range []string{sampleTransaction, sampleAccountEvent} {
		e, err := DecodeAt([]byte(in), sampleNow)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Encode(e)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		e2, err := DecodeAt(b, sampleNow)
		if err != nil {
			t.Fatalf("Decode(Encode(e)): %v", err)
		}
		if !reflect.DeepEqual(e, e2) {
			t.Errorf("round trip changed the envelope:\n%+v\n%+v", e, e2)
		}
		b2, _ := Encode(e2)
		if !bytes.Equal(b, b2) {
			t.Errorf("encoding is not stable:\n%s\n%s", b, b2)
		}
	}
	// The format promise: amount is a string on the wire, never a number.
	e, _ := DecodeAt([]byte(sampleTransaction), sampleNow)
	b, _ := Encode(e)
	if !bytes.Contains(b, []byte(`"amount":"1249.90"`)) {
		t.Errorf("amount not encoded as a decimal string: %s", b)
	}
	// HTML-sensitive characters survive as sent.
	e.Reference = "<a&b>"
	b, _ = Encode(e)
	if !bytes.Contains(b, []byte(`"reference":"<a&b>"`)) {
		t.Errorf("reference escaped: %s", b)
	}
}

func TestEncodeRefusesWhatDecodeRefuses(t *testing.T) {
	e, _ := DecodeAt([]byte(sampleTransaction), sampleNow)
	e.V = 0 // Encode fills in the version
	if _, err := Encode(e); err != nil {
		t.Fatalf("Encode with V=0: %v", err)
	}
	bad := e
	bad.WorkspaceID = UUID{}
	if _, err := Encode(bad); !errors.Is(err, ErrMissingWorkspace) {
		t.Errorf("Encode without workspace = %v, want ErrMissingWorkspace", err)
	}
	bad = e
	bad.Amount = "12,50"
	if _, err := Encode(bad); !errors.Is(err, ErrNotJSON) {
		t.Errorf("Encode with amount 12,50 = %v, want ErrNotJSON", err)
	}
}

func TestValidDecimal(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "1249.90": true, "-3.5": true, "100": true, "0.000001": true,
		"": false, "-": false, ".5": false, "5.": false, "1.2.3": false, "1e3": false,
		"+1": false, " 1": false, "1,5": false, "NaN": false, strings.Repeat("9", 41): false,
	} {
		if got := validDecimal(s); got != want {
			t.Errorf("validDecimal(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestUUID(t *testing.T) {
	u, err := ParseUUID("6F1C2B9E-3D4A-4F5B-9C8D-7E6F5A4B3C2D")
	if err != nil {
		t.Fatal(err)
	}
	if u.String() != "6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d" {
		t.Errorf("String = %s", u)
	}
	for _, bad := range []string{"", "6f1c2b9e3d4a4f5b9c8d7e6f5a4b3c2d", "6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2g",
		"{6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2}", "6f1c2b9e-3d4a-4f5b-9c8d_7e6f5a4b3c2d"} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q) succeeded", bad)
		}
	}
}

func TestTransactionID(t *testing.T) {
	ws, _ := ParseUUID("6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d")
	ws2, _ := ParseUUID("6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2e")
	at := time.Date(2026, 11, 30, 7, 41, 12, 345e6, time.UTC)

	id := TransactionID(ws, "txn-1", at)
	if id != TransactionID(ws, "txn-1", at.In(time.FixedZone("CET", 3600))) {
		t.Error("same transaction, same instant in another zone: different IDs")
	}
	if id == TransactionID(ws, "txn-2", at) || id == TransactionID(ws2, "txn-1", at) {
		t.Error("different natural keys share an ID")
	}
	if id == AccountEventID(ws, "txn-1", at) {
		t.Error("transaction and account event with the same key share an ID")
	}
	// Layout: 48-bit Unix ms prefix, version 7, RFC 9562 variant.
	var ms int64
	for _, b := range id[:6] {
		ms = ms<<8 | int64(b)
	}
	if ms != at.UnixMilli() {
		t.Errorf("time prefix = %d, want %d", ms, at.UnixMilli())
	}
	if id[6]>>4 != 7 || id[8]>>6 != 2 {
		t.Errorf("version/variant bits wrong in %s", id)
	}
	// Time-ordered: a later transaction sorts after an earlier one.
	later := TransactionID(ws, "txn-0", at.Add(time.Millisecond))
	if bytes.Compare(later[:], id[:]) <= 0 {
		t.Errorf("%s (later) does not sort after %s", later, id)
	}
}

func TestNameBasedIDs(t *testing.T) {
	ws, _ := ParseUUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8") // RFC 9562's DNS namespace
	// Standard UUIDv5, so it can be recomputed elsewhere: this value is
	// uuid_generate_v5('6ba7b810-9dad-11d1-80b4-00c04fd430c8', 'customer:cust-1')
	// per RFC 9562 (checked against Python's uuid.uuid5).
	const want = "8a5864e9-bc1c-5242-a48c-557fa54387cf"
	if got := CustomerID(ws, "cust-1").String(); got != want {
		t.Errorf("CustomerID = %s, want %s", got, want)
	}
	c, a, p := CustomerID(ws, "x"), AccountID(ws, "x"), CounterpartyID(ws, "x")
	if c == a || a == p || c == p {
		t.Error("customer, account and counterparty with the same key share an ID")
	}
	if c != CustomerID(ws, "x") {
		t.Error("CustomerID not deterministic")
	}
	if c[6]>>4 != 5 || c[8]>>6 != 2 {
		t.Errorf("version/variant bits wrong in %s", c)
	}
}

func BenchmarkTransactionID(b *testing.B) {
	ws, _ := ParseUUID("6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d")
	at := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		TransactionID(ws, "txn-2026-11-30-000123456", at)
	}
}

// parseUUIDByteWise is ParseUUID written the plain way, a branch per
// digit: the table's answers must be its answers.
func parseUUIDByteWise(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, errUUIDSyntax
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := fromHex(s[i])
		lo, ok2 := fromHex(s[i+1])
		if !ok1 || !ok2 {
			return UUID{}, errUUIDSyntax
		}
		u[j] = hi<<4 | lo
		j++
		i += 2
	}
	return u, nil
}

func TestParseUUIDAgreesWithByteWise(t *testing.T) {
	base := []byte("6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d")
	// Every byte value at every position, then random UUIDs.
	for pos := range base {
		for c := range 256 {
			b := append([]byte(nil), base...)
			b[pos] = byte(c)
			got, gotErr := ParseUUID(string(b))
			want, wantErr := parseUUIDByteWise(string(b))
			if got != want || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("ParseUUID(%q) = %v, %v; byte-wise %v, %v", b, got, gotErr, want, wantErr)
			}
		}
	}
	for i := range 10000 {
		var u UUID
		for k := range u {
			u[k] = byte(i*31 + k*7 + i>>3)
		}
		for _, s := range []string{u.String(), strings.ToUpper(u.String())} {
			got, err := ParseUUID(s)
			if err != nil || got != u {
				t.Fatalf("ParseUUID(%q) = %v, %v; want %v", s, got, err, u)
			}
		}
	}
}
