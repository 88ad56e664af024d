package event

import (
	"strings"
	"testing"
	"time"
)

// The codec's benchmarks: decoding and encoding the records the pipelines
// carry, and the path of a record the fast decoder leaves to encoding/json.

func BenchmarkDecode(b *testing.B) { benchDecode(b, sampleTransaction, DecodeAt) }

// BenchmarkDecodeUndecided decodes the shape the ingest API writes.
func BenchmarkDecodeUndecided(b *testing.B) { benchDecode(b, sampleUndecided, DecodeAt) }

// BenchmarkDecodeUndecidedLibrary is the path of a record decodeFast is
// unsure of: encoding/json alone.
func BenchmarkDecodeUndecidedLibrary(b *testing.B) { benchDecode(b, sampleUndecided, decodeStd) }

// BenchmarkDecodeEscaped decodes a record whose counterparty name holds an
// escaped quote (a name such as `Café "Zum Hirschen"`), the record shape
// that escapes in its text.
func BenchmarkDecodeEscaped(b *testing.B) {
	benchDecode(b, strings.Replace(sampleUndecided, `"name":"Hausverwaltung`, `"name":"\"Haus\" verwaltung`, 1), DecodeAt)
}

func BenchmarkEncode(b *testing.B) { benchEncode(b, sampleTransaction) }

// BenchmarkEncodeUndecided encodes the record the ingest API writes most,
// a transaction without a decision.
func BenchmarkEncodeUndecided(b *testing.B) { benchEncode(b, sampleUndecided) }

func benchDecode(b *testing.B, record string, decode func([]byte, time.Time) (Envelope, error)) {
	raw := []byte(record)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		if _, err := decode(raw, sampleNow); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

func benchEncode(b *testing.B, record string) {
	e, err := DecodeAt([]byte(record), sampleNow)
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
