package event

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestDecodeEnforcesLimits: a record another producer wrote with a field
// the table cannot hold is undecodable (dead-lettered at decode) instead of
// failing its batch in PostgreSQL. Each case once failed a batch forever
// (SQLSTATE 54000 for the long external_id, 22021 for a NUL, 22003 and
// 23514 for the amounts) or was stored although the API refuses it.
func TestDecodeEnforcesLimits(t *testing.T) {
	set := func(doc, path, val string) string {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if parent, child, ok := strings.Cut(path, "."); ok {
			var sub map[string]json.RawMessage
			if err := json.Unmarshal(m[parent], &sub); err != nil {
				t.Fatal(err)
			}
			sub[child] = json.RawMessage(val)
			m[parent], _ = json.Marshal(sub)
		} else {
			m[path] = json.RawMessage(val)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	long := func(n int) string { return q(strings.Repeat("x", n)) }
	tests := []struct {
		name, doc, path, val string
	}{
		{"external_id of 3,200 bytes", sampleTransaction, "external_id", long(3200)},
		{"external_id one byte too long", sampleTransaction, "external_id", long(MaxExternalIDBytes + 1)},
		{"external_id only whitespace", sampleTransaction, "external_id", q("   ")},
		{"external_id with NUL", sampleTransaction, "external_id", `"a\u0000b"`},
		{"account_external_id too long", sampleTransaction, "account_external_id", long(MaxExternalIDBytes + 1)},
		{"customer_external_id too long", sampleTransaction, "customer_external_id", long(MaxExternalIDBytes + 1)},
		{"reference too long", sampleTransaction, "reference", long(MaxReferenceBytes + 1)},
		{"reference with newline", sampleTransaction, "reference", `"a\nb"`},
		{"type too long", sampleTransaction, "type", long(MaxLabelBytes + 1)},
		{"status too long", sampleTransaction, "status", long(MaxLabelBytes + 1)},
		{"channel with NUL", sampleTransaction, "channel", `"\u0000"`},
		{"counterparty name too long", sampleTransaction, "counterparty.name", long(MaxNameBytes + 1)},
		{"counterparty fingerprint too long", sampleTransaction, "counterparty.fingerprint", long(MaxFingerprintBytes + 1)},
		{"counterparty identifier_enc too long", sampleTransaction, "counterparty.identifier_enc", long(MaxProtectedIdentifierBytes + 1)},
		{"counterparty identifier_kind unknown", sampleTransaction, "counterparty.identifier_kind", q("card")},
		{"negative amount", sampleTransaction, "amount", q("-1.00")},
		{"amount of 17 integer digits", sampleTransaction, "amount", q("12345678901234567")},
		{"amount of 5 decimals", sampleTransaction, "amount", q("1.00001")},
		{"currency not ISO 4217", sampleTransaction, "currency", q("ABC")},
		{"decision score numeric(9,4) cannot hold", sampleTransaction, "decision.score", "100000"},
		{"decision reason too long", sampleTransaction, "decision.reasons", "[" + long(MaxNameBytes+1) + "]"},
		{"metadata too large", sampleTransaction, "metadata", `{"k":` + long(MaxObjectBytes) + `}`},
		{"occurred_at in 1970", sampleTransaction, "occurred_at", q("1970-01-01T00:00:00Z")},
		{"occurred_at in 2100", sampleTransaction, "occurred_at", q("2100-01-01T00:00:00Z")},
		{"metadata with \\u0000 (jsonb 22P05)", sampleTransaction, "metadata", `{"k":"a\u0000b"}`},
		{"metadata with a number numeric cannot hold (22003)", sampleTransaction, "metadata", `{"k":1e999999}`},
		{"metadata with a duplicate key", sampleTransaction, "metadata", `{"k":1,"k":2}`},
		{"account event attributes with \\u0000", sampleAccountEvent, "attributes", `{"k":"\u0000"}`},
		{"account event type too long", sampleAccountEvent, "type", long(MaxLabelBytes + 1)},
		{"account event attributes too large", sampleAccountEvent, "attributes", `{"k":` + long(MaxObjectBytes) + `}`},
		{"account event occurred_at in 2100", sampleAccountEvent, "occurred_at", q("2100-06-01T00:00:00Z")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := set(tt.doc, tt.path, tt.val)
			_, err := DecodeAt([]byte(in), sampleNow)
			if !errors.Is(err, ErrOutOfLimits) || !IsUndecodable(err) {
				t.Fatalf("Decode = %v, want ErrOutOfLimits", err)
			}
			if strings.Contains(err.Error(), "xxxxxxxx") {
				t.Errorf("error quotes the value: %v", err)
			}
		})
	}
	// At the limits exactly, everything is accepted.
	ok := set(sampleTransaction, "external_id", long(MaxExternalIDBytes))
	ok = set(ok, "amount", q("9999999999999999.9999"))
	ok = set(ok, "reference", long(MaxReferenceBytes))
	ok = set(ok, "counterparty.name", long(MaxNameBytes))
	if _, err := DecodeAt([]byte(ok), sampleNow); err != nil {
		t.Errorf("a record at the limits: %v", err)
	}
}

// TestDecodeWindow pins the occurred_at window and its margins: from the
// oldest month kept as of DecodeLagMargin ago, to the end of the last
// month the worker creates as of DecodeClockMargin ahead.
func TestDecodeWindow(t *testing.T) {
	d := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		now, from, until string
	}{
		// Mid-month: last month to three months ahead.
		{"2026-11-15T12:00:00Z", "2026-10-01T00:00:00Z", "2027-03-01T00:00:00Z"},
		// Within a week after the 1st: the month before last is still read.
		{"2026-12-03T00:00:00Z", "2026-10-01T00:00:00Z", "2027-04-01T00:00:00Z"},
		// The last day of a month: the worker may already have rolled over.
		{"2026-11-30T12:00:00Z", "2026-10-01T00:00:00Z", "2027-04-01T00:00:00Z"},
	}
	for _, tt := range tests {
		from, until := DecodeWindow(d(tt.now))
		if !from.Equal(d(tt.from)) || !until.Equal(d(tt.until)) {
			t.Errorf("DecodeWindow(%s) = [%s, %s), want [%s, %s)", tt.now, from, until, tt.from, tt.until)
		}
	}
	now := d("2026-11-15T12:00:00Z")
	from, until := DecodeWindow(now)
	if CheckOccurredAt(from, now) != nil || CheckOccurredAt(until.Add(-time.Microsecond), now) != nil {
		t.Errorf("the window's own bounds are refused")
	}
	if CheckOccurredAt(from.Add(-time.Microsecond), now) == nil || CheckOccurredAt(until, now) == nil {
		t.Errorf("just outside the window is accepted")
	}
	// Everything the API accepts, Decode accepts, whenever it is read
	// within the lag margin.
	for _, s := range []string{"2026-11-01T00:00:00Z", "2026-11-30T23:59:59Z", "2026-12-31T23:00:00Z"} {
		accepted := d(s)
		aFrom, aUntil := AcceptWindow(accepted)
		for _, at := range []time.Time{aFrom, aUntil} {
			if err := CheckOccurredAt(at, accepted.Add(DecodeLagMargin-time.Second)); err != nil {
				t.Errorf("accepted at %s with occurred_at %s, refused when read a week later: %v", s, at, err)
			}
		}
	}
}

// TestAmountLimitsMatchNumeric: the amount limits are numeric(20,4)'s.
func TestAmountLimitsMatchNumeric(t *testing.T) {
	if AmountMaxIntegerDigits+AmountMaxScale != 20 || AmountMaxScale != 4 {
		t.Errorf("amount limits %d+%d do not match numeric(20,4)", AmountMaxIntegerDigits, AmountMaxScale)
	}
	for s, want := range map[string]bool{
		"0": true, "1249.90": true, "9999999999999999.9999": true, "0.0001": true,
		"-1": false, "1.": false, ".5": false, "1e3": false, "12345678901234567": false, "1.23456": false, "": false,
	} {
		if got := CheckAmount(s) == nil; got != want {
			t.Errorf("CheckAmount(%q) ok = %v, want %v", s, got, want)
		}
	}
	if !IsCurrency("EUR") || IsCurrency("XXX") || IsCurrency("eur") {
		t.Errorf("currency list")
	}
}

// The cached window is DecodeWindow's at every clock, across month ends
// (both margins' edges) and when the clock goes back.
func TestDecodeWindowCachedIsDecodeWindow(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	check := func(now time.Time) {
		t.Helper()
		from, until := decodeWindowCached(now)
		wantFrom, wantUntil := DecodeWindow(now)
		if !from.Equal(wantFrom) || !until.Equal(wantUntil) {
			t.Fatalf("at %s: cached [%s, %s), DecodeWindow [%s, %s)", now, from, until, wantFrom, wantUntil)
		}
	}
	// Every 10 minutes over 14 months, then back through the same span in
	// big steps, then each margin's edge to the microsecond.
	for now := start; now.Before(start.AddDate(1, 2, 0)); now = now.Add(10 * time.Minute) {
		check(now)
	}
	for now := start.AddDate(1, 2, 0); now.After(start); now = now.Add(-61 * time.Hour) {
		check(now)
	}
	for m := 0; m < 14; m++ {
		month := start.AddDate(0, m, 0)
		for _, edge := range []time.Time{month.Add(DecodeLagMargin), month.Add(-DecodeClockMargin)} {
			for _, d := range []time.Duration{-time.Microsecond, 0, time.Microsecond} {
				check(edge.Add(d))
				check(edge.Add(d).In(time.FixedZone("x", 5*3600)))
			}
		}
	}
	check(time.Now())
}
