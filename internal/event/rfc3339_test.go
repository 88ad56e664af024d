package event

import (
	"testing"
	"time"
)

var rfc3339Samples = []string{
	"2026-11-30T07:41:12.345Z", "2026-11-30T07:41:12Z", "2026-11-30T07:41:12.123456789+01:00", "2026-11-30T07:41:12.1-09:30",
	"1970-01-01T00:30:00+01:00", "1969-12-31T23:30:00-01:00", "2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "2100-02-29T00:00:00Z",
	"2000-02-29T23:59:59.999999999Z", "2026-04-31T00:00:00Z", "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-01-00T00:00:00Z",
	"2026-01-01T24:00:00Z", "2026-01-01T23:60:00Z", "2026-01-01T23:59:60Z", "2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00+23:59",
	"2026-01-01T00:00:00.Z", "2026-01-01T00:00:00.1234567890Z", "2026-01-01T00:00:00,5Z", "2026-01-01t00:00:00z", "2026-01-01 00:00:00Z",
	"2026-1-01T00:00:00Z", "+026-01-01T00:00:00Z", "2026-01-01T00:00:00", "2026-01-01T00:00:00+0100", "2026-01-01T00:00:00Z ",
	"0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999-23:59", "2026-01-01T00:00:00-00:00", "2026-01-01T0a:00:00Z",
}

// TestParseRFC3339IsTimeParse: whatever the direct reader takes, time.Parse
// takes too, as the same instant and with the same year as written.
func TestParseRFC3339IsTimeParse(t *testing.T) {
	for _, s := range rfc3339Samples {
		checkRFC3339(t, s)
	}
	for _, s := range rfc3339Samples[:4] {
		if _, _, ok := ParseRFC3339(s); !ok {
			t.Errorf("%q: the usual form is not read directly", s)
		}
	}
}

func FuzzParseRFC3339(f *testing.F) {
	for _, s := range rfc3339Samples {
		f.Add(s)
	}
	f.Fuzz(checkRFC3339)
}

func checkRFC3339(t *testing.T, s string) {
	got, year, ok := ParseRFC3339(s)
	want, err := time.Parse(time.RFC3339Nano, s)
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("%q: read as %v, time.Parse refuses it: %v", s, got, err)
	}
	if !got.Equal(want) || got.Location() != time.UTC || year != want.Year() {
		t.Fatalf("%q: read as %v (year %d), time.Parse gives %v (year %d)", s, got, year, want, want.Year())
	}
}
