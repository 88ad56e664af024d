package apirequest

import (
	"bytes"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/apisample"
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
	{event.KindTransaction, apisample.Transaction},
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
		got, err := DecodeBatch(apisample.Batch(s.item, s.item), s.kind, apisample.Workspace, apisample.Now.Add(123456789*time.Nanosecond), 10, apisample.Protector)
		if err != nil || len(got[0].Errors) > 0 {
			t.Fatalf("%s: %v %v", s.item, err, got[0].Errors)
		}
		it := got[1].Item
		if err := it.WithID(event.TransactionID(apisample.Workspace, "first", apisample.Now.Add(-time.Hour))); err != nil {
			t.Fatal(err)
		}
		for _, it := range []Item{got[0].Item, it} {
			want, err := event.Encode(it.Envelope)
			if err != nil {
				t.Fatalf("%s: event.Encode refuses what the reader took: %v", s.item, err)
			}
			if !bytes.Equal(it.Value, want) {
				t.Errorf("record\n%s\nevent.Encode\n%s", it.Value, want)
			}
			if _, err := event.DecodeAt(it.Value, apisample.Now); err != nil {
				t.Errorf("%s: the record does not decode: %v", it.Value, err)
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
		got, err := DecodeBatch(apisample.Batch(raw), kind, apisample.Workspace, apisample.Now, 10, apisample.Protector)
		if err != nil || len(got) != 1 || len(got[0].Errors) > 0 {
			return
		}
		want, err := event.Encode(got[0].Item.Envelope)
		if err != nil {
			t.Fatalf("event.Encode refuses what the reader took: %v", err)
		}
		if !bytes.Equal(got[0].Item.Value, want) {
			t.Fatalf("record\n%s\nevent.Encode\n%s", got[0].Item.Value, want)
		}
	})
}

// A released request keeps nothing alive and hands the next one zero
// items: its decoded items are cleared whole before they go back.
func TestReleasedItemsAreCleared(t *testing.T) {
	var slab RecordSlab
	got, err := DecodeBatchInto(apisample.Batch(apisample.Transaction, apisample.Transaction), event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector, &slab)
	if err != nil || len(got) != 2 || got[0].Item.ExternalID == "" || len(got[0].Item.Value) == 0 {
		t.Fatalf("decodeBatchInto: %v %+v", err, got)
	}
	p := slab.parsed
	if p == nil {
		t.Fatal("the items did not come from the pool")
	}
	slab.Release()
	for i, it := range (*p)[:cap(*p)] {
		if it.Item.ExternalID != "" || it.Item.Value != nil || it.Item.Envelope.ExternalID != "" || it.Errors != nil {
			t.Fatalf("item %d kept after release: %+v", i, it.Item)
		}
	}
	if len(*p) != 0 || slab.parsed != nil || slab.chunks != nil {
		t.Errorf("release left %d items, parsed %v, %d chunks", len(*p), slab.parsed, len(slab.chunks))
	}
}
