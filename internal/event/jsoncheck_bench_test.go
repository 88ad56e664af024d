package event

import (
	"strings"
	"syscall"
	"testing"
)

// The JSON checker's benchmarks: a 500-item request body as the ingest API
// checks it before splitting it, and one record as the persister checks
// its metadata, so a change to the scanner the checker and the decoder
// share shows on both callers.

// BenchmarkCheckJSONBody checks the body of a 500-transaction request.
func BenchmarkCheckJSONBody(b *testing.B) {
	items := make([]string, 500)
	for i := range items {
		items[i] = sampleRequestItem
	}
	benchCheckJSON(b, `{"items":[`+strings.Join(items, ",")+`]}`, 3)
}

// BenchmarkCheckJSONRecord checks one whole record.
func BenchmarkCheckJSONRecord(b *testing.B) { benchCheckJSON(b, sampleTransaction, 0) }

// sampleRequestItem is one item of a transaction request, as a client
// sends it (devtools/apisample's, which this package may not import).
const sampleRequestItem = `{"external_id":"t-1","occurred_at":"2026-11-30T07:41:12.345+01:00","account_external_id":"acc-1",` +
	`"customer_external_id":"cust-1","amount":"1249.90","currency":"EUR","direction":"out","type":"transfer",` +
	`"reference":"rent","metadata":{ "ip": "203.0.113.7" },` +
	`"counterparty":{"name":"Hausverwaltung Müller GmbH","identifier":"DE89 3704 0044 0532 0130 00","identifier_kind":"iban"}}`

func benchCheckJSON(b *testing.B, doc string, framing int) {
	raw := []byte(doc)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		if err := CheckJSONIn(raw, framing); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// processCPU is the process's CPU time so far (user and system).
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// reportCPU reports the CPU time per operation since cpu: on a machine
// other processes share, wall time per operation also counts the time the
// benchmark waited for a core, CPU time does not.
func reportCPU(b *testing.B, cpu int64) {
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}
