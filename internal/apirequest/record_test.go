package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
)

// recordSamples are items of every shape the reader takes: both kinds,
// counterparties with and without identifiers, every optional field, text
// needing escapes (quotes, backslashes, U+2028, HTML characters, other
// scripts) and metadata with spaces to compact.
var recordSamples = []struct {
	kind event.Kind
	item string
}{
	{event.KindTransaction, validTxn},
	{event.KindTransaction, `{"external_id":"t\"q\\b","occurred_at":"2026-11-30T07:41:12.123456789Z","account_external_id":"a<&>",` +
		`"amount":"0.5","currency":"JPY","direction":"in","status":"pending","channel":"pos","reference":"line\u2028sep \u2029 para é 中",` +
		`"counterparty":{"name":"O'Neil & Söhne <GmbH>"},"metadata":{"a" : [1, 2.50, {"b" :null}], "c":"\u2028<"}}`},
	{event.KindTransaction, `{"external_id":"t-3","occurred_at":"2026-11-30T07:00:00+14:00","account_external_id":"acc","amount":"12","currency":"EUR","direction":"out",` +
		`"counterparty":{"identifier":"+49 171 1234567","identifier_kind":"phone"}}`},
	{event.KindTransaction, `{"external_id":"t-4","occurred_at":"2026-11-29T23:59:59.999999Z","account_external_id":"acc","amount":"12","currency":"EUR","direction":"out",` +
		`"counterparty":{"identifier":"12345678","identifier_kind":"account_number","name":""}}`},
	{event.KindTransaction, `{"external_id":"t-5","occurred_at":"2026-11-30T07:00:00Z","account_external_id":"acc","amount":"12","currency":"EUR","direction":"out","counterparty":{}}`},
	{event.KindAccountEvent, `{"external_id":"ev-1","occurred_at":"2026-11-30T07:00:00.1Z","customer_external_id":"c","account_external_id":"a","type":"sim_swap","attributes":{ "x" : 1, "y":"\"" }}`},
	{event.KindAccountEvent, `{"external_id":"ev-2","occurred_at":"2026-11-30T07:00:00Z","customer_external_id":"c","type":"sign_in"}`},
}

// TestRecordIsEncodes: every record the reader writes is the bytes
// event.Encode writes for its envelope (and so passes Encode's checks and
// reads back with Decode), a resend under the first ID included.
func TestRecordIsEncodes(t *testing.T) {
	for _, s := range recordSamples {
		got, err := decodeBatch(batchOf(s.item, s.item), s.kind, testWS, testNow.Add(123456789*time.Nanosecond), 10, testProt)
		if err != nil || len(got[0].errors) > 0 {
			t.Fatalf("%s: %v %v", s.item, err, got[0].errors)
		}
		it := got[1].item
		if err := it.withID(event.TransactionID(testWS, "first", testNow.Add(-time.Hour))); err != nil {
			t.Fatal(err)
		}
		for _, it := range []item{got[0].item, it} {
			want, err := event.Encode(it.env)
			if err != nil {
				t.Fatalf("%s: event.Encode refuses what the reader took: %v", s.item, err)
			}
			if !bytes.Equal(it.value, want) {
				t.Errorf("record\n%s\nevent.Encode\n%s", it.value, want)
			}
			if _, err := event.DecodeAt(it.value, testNow); err != nil {
				t.Errorf("%s: the record does not decode: %v", it.value, err)
			}
		}
	}
}

// FuzzRecordIsEncode: whatever item the reader accepts, its record is
// event.Encode's bytes.
func FuzzRecordIsEncode(f *testing.F) {
	for _, s := range recordSamples {
		f.Add(s.item, s.kind == event.KindTransaction)
	}
	f.Fuzz(func(t *testing.T, raw string, txn bool) {
		kind := event.KindAccountEvent
		if txn {
			kind = event.KindTransaction
		}
		got, err := decodeBatch(batchOf(raw), kind, testWS, testNow, 10, testProt)
		if err != nil || len(got) != 1 || len(got[0].errors) > 0 {
			return
		}
		want, err := event.Encode(got[0].item.env)
		if err != nil {
			t.Fatalf("event.Encode refuses what the reader took: %v", err)
		}
		if !bytes.Equal(got[0].item.value, want) {
			t.Fatalf("record\n%s\nevent.Encode\n%s", got[0].item.value, want)
		}
	})
}

// TestBatchAnswerIsMarshal: a batch answer is json.Marshal's bytes, for
// every kind of result and text needing escapes.
func TestBatchAnswerIsMarshal(t *testing.T) {
	for _, resp := range []batchResponse{
		{},
		{Results: []itemResult{}},
		{Accepted: 2, Duplicate: 1, Rejected: 1, Retry: 1, Conflict: 1, Results: []itemResult{
			{Index: 0, ExternalID: "t-1", Status: statusAccepted, ID: "0193f5a2-7c00-7abc-8def-0123456789ab"},
			{Index: 1, ExternalID: `<a href="x">&\u2028` + "\u2029\x01\t\xff é", Status: statusDuplicate, ID: "0193f5a2-7c00-7abc-8def-0123456789ab"},
			{Index: 2, Status: statusRejected, Errors: []FieldError{{Field: "items[2].amount", Message: "required"}, {Field: "items[2].x<", Message: `want "a"`}}},
			{Index: 3, ExternalID: "t-4", Status: statusRetry, ID: "0193f5a2-7c00-7abc-8def-0123456789ac", Message: "send it again & again"},
			{Index: 4, ExternalID: "t-5", Status: statusConflict, ID: "x", Message: msgConflict, Errors: []FieldError{}},
		}},
	} {
		want, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendBatchResponse(nil, &resp); !bytes.Equal(got, want) {
			t.Errorf("answer\n%s\njson.Marshal\n%s", got, want)
		}
	}
}

// A request's record buffers are reused only when no record in them can
// be read again: deliver is settled when the pipeline acknowledged every
// message, or never took the batch, and not settled while the output may
// still hold the records (a failed write, no acknowledgement in time).
func TestRecordBuffersReusedOnlyOnceAcknowledged(t *testing.T) {
	for _, tt := range []struct {
		name string
		ack  func(*job) // nil: nobody takes the batch
		want bool
	}{
		{"acknowledged", func(j *job) { j.done <- nil }, true},
		{"failed", func(j *job) { j.done <- errors.New("writing to topic sp.txn.ingested: broken") }, false},
		{"no acknowledgement in time", func(*job) {}, false},
		{"not taken", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &ingestAPI{jobs: make(chan *job), closing: make(chan struct{}), ackTimeout: 200 * time.Millisecond}
			a.log = service.MockResources().Logger()
			if tt.ack != nil {
				go func() { tt.ack(<-a.jobs) }()
			}
			items := []*item{{index: 0, value: []byte(`{}`), key: "k"}}
			results := make([]itemResult, 1)
			if got := a.deliver(event.KindTransaction, "txn.ingested", items, results); got != tt.want {
				t.Errorf("settled %v, want %v (answered %s)", got, tt.want, results[0].Status)
			}
		})
	}
}

// A released request keeps nothing alive and hands the next one zero
// items: its decoded items are cleared whole before they go back.
func TestReleasedItemsAreCleared(t *testing.T) {
	var slab recordSlab
	got, err := decodeBatchInto(batchOf(validTxn, validTxn), event.KindTransaction, testWS, testNow, 10, testProt, &slab)
	if err != nil || len(got) != 2 || got[0].item.externalID == "" || len(got[0].item.value) == 0 {
		t.Fatalf("decodeBatchInto: %v %+v", err, got)
	}
	p := slab.parsed
	if p == nil {
		t.Fatal("the items did not come from the pool")
	}
	slab.release()
	for i, it := range (*p)[:cap(*p)] {
		if it.item.externalID != "" || it.item.value != nil || it.item.env.ExternalID != "" || it.errors != nil {
			t.Fatalf("item %d kept after release: %+v", i, it.item)
		}
	}
	if len(*p) != 0 || slab.parsed != nil || slab.chunks != nil {
		t.Errorf("release left %d items, parsed %v, %d chunks", len(*p), slab.parsed, len(slab.chunks))
	}
}
