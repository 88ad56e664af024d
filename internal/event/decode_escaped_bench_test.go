package event

import (
	"strings"
	"testing"
)

// BenchmarkDecodeEscaped decodes a record whose counterparty name holds an
// escaped quote (a name such as `Café "Zum Hirschen"`), the record shape
// that escapes in its text.
func BenchmarkDecodeEscaped(b *testing.B) {
	raw := []byte(strings.Replace(sampleUndecided, `"name":"Hausverwaltung`, `"name":"\"Haus\" verwaltung`, 1))
	if _, err := DecodeAt(raw, sampleNow); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeAt(raw, sampleNow); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeUndecided encodes the record the ingest API writes most,
// a transaction without a decision.
func BenchmarkEncodeUndecided(b *testing.B) {
	e, err := DecodeAt([]byte(sampleUndecided), sampleNow)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(e); err != nil {
			b.Fatal(err)
		}
	}
}
