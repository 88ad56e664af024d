package eventdecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
)

func TestEventDecodeConfig(t *testing.T) {
	for _, tt := range []struct {
		yaml    string
		wantErr bool
	}{
		{"kind: transaction", false},
		{"kind: account_event", false},
		{"kind: transaction\nrole: stream", false},
		{"kind: transaction\nrole: ingest", true},
		{"kind: refund", true},
		{"{}", true},
	} {
		conf, err := eventDecodeSpec().ParseYAML(tt.yaml, nil)
		if err == nil {
			_, err = newEventDecode(conf, service.MockResources())
		}
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseYAML(%q): %v, wantErr %v", tt.yaml, err, tt.wantErr)
		}
	}
}

type stageTimes map[string]int

func (s stageTimes) Timing(_ int64, labels ...string) { s[labels[len(labels)-1]]++ }

// A record no partition will hold (2100) is flagged like any undecodable
// one, with the reason.
func TestEventDecodeFlagsAnOccurredAtNoPartitionHolds(t *testing.T) {
	ws := event.UUID{1}
	at := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := event.Encode(event.Envelope{
		Kind: event.KindTransaction, ID: event.TransactionID(ws, "far", at), WorkspaceID: ws,
		ExternalID: "far", OccurredAt: at, AccountExternalID: "acc-1",
		Amount: "1.00", Currency: "EUR", Direction: event.DirectionOut,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = event.Decode(b)
	if !errors.Is(err, event.ErrOutOfLimits) || !strings.Contains(err.Error(), "occurred_at") {
		t.Fatalf("Decode of a record dated 2100 = %v, want ErrOutOfLimits naming occurred_at", err)
	}
}

func testTransaction(t *testing.T, ws event.UUID, ext string) []byte {
	t.Helper()
	// Inside the partition window whenever the test runs: the decoder
	// refuses an occurred_at no partition will hold.
	at := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	b, err := event.Encode(event.Envelope{
		Kind: event.KindTransaction, ID: event.TransactionID(ws, ext, at), WorkspaceID: ws,
		ExternalID: ext, OccurredAt: at, AccountExternalID: "acc-1",
		Amount: "12.50", Currency: "EUR", Direction: event.DirectionOut,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The later steps must use what the processor decoded, not decode again, and
// must see a flagged record as flagged.
func TestEventDecodeHandsEnvelopeOn(t *testing.T) {
	ws := event.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	good := testTransaction(t, ws, "txn-000001")
	times := stageTimes{}
	d := &eventDecode{kind: event.KindTransaction, table: "transactions", duration: times}
	out, err := d.ProcessBatch(context.Background(), service.MessageBatch{service.NewMessage(good), service.NewMessage([]byte("{"))})
	if err != nil || len(out) != 1 || len(out[0]) != 2 {
		t.Fatalf("ProcessBatch: %v, %v", out, err)
	}
	first, err := eventmsg.Of(out[0][0], event.KindTransaction)
	if err != nil || first.ExternalID != "txn-000001" {
		t.Fatalf("eventmsg.Of(good) = %+v, %v", first, err)
	}
	if again, _ := eventmsg.Of(out[0][0], event.KindTransaction); again != first {
		t.Errorf("a later step decoded again instead of using the processor's envelope")
	}
	if err := out[0][1].GetError(); !errors.Is(err, event.ErrNotJSON) {
		t.Errorf("flag on a broken record = %v, want ErrNotJSON", err)
	}
	if raw, _ := out[0][0].AsBytes(); string(raw) != string(good) {
		t.Errorf("the processor changed the record's content")
	}
	if times["decode"] != 1 {
		t.Errorf("decode stage timed %d times per batch, want 1", times["decode"])
	}
}

func TestEventDecodeFlagsTheWrongKind(t *testing.T) {
	ws := event.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	d := &eventDecode{kind: event.KindAccountEvent, table: "account_events", duration: stageTimes{}}
	out, _ := d.ProcessBatch(context.Background(), service.MessageBatch{service.NewMessage(testTransaction(t, ws, "t1"))})
	if err := out[0][0].GetError(); !errors.Is(err, event.ErrNotJSON) {
		t.Errorf("a transaction on the account events topic: %v, want ErrNotJSON", err)
	}
}

// loadgenLike is a transaction as loadgen and the ingest API write them:
// a customer, a counterparty and metadata beside the required fields.
func loadgenLike(t *testing.T, ws event.UUID, n int) []byte {
	t.Helper()
	at := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour).Add(time.Duration(n) * time.Millisecond)
	ext := fmt.Sprintf("txn-%06d", n)
	b, err := event.Encode(event.Envelope{
		Kind: event.KindTransaction, ID: event.TransactionID(ws, ext, at), WorkspaceID: ws,
		ExternalID: ext, OccurredAt: at, ReceivedAt: at.Add(time.Second),
		CustomerExternalID: fmt.Sprintf("cust-%d", n%50), AccountExternalID: fmt.Sprintf("acc-%d", n%100),
		Type: "card", Amount: "1234.56", Currency: "EUR", Direction: event.DirectionOut,
		Status: "completed", Channel: "online",
		Counterparty: &event.Counterparty{Name: "Acme GmbH", IdentifierKind: "iban", IdentifierMasked: "DE89****3000", Fingerprint: "fp-1234"},
		Metadata:     json.RawMessage(`{"source":"loadgen","seq":12}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// maxDecodeAllocsPerRecord bounds what event_decode allocates for a record
// beyond its batch's few (the slots, the batch handed on): the message that
// carries the envelope (the message and its part, Benthos's two); the
// decode itself allocates nothing of its own for a record the fast decoder
// reads (its counterparty goes to the record's slot). Every allocation a
// record is one more object the stream's collector marks and sweeps, at
// 20,000 records a second.
const maxDecodeAllocsPerRecord = 2

// decodeAllocsPerBatch is what a batch allocates whatever its size.
const decodeAllocsPerBatch = 8

// The stream decodes every record once, within maxDecodeAllocsPerRecord
// allocations (2.01 measured a record of a 500-record batch, since the
// envelope, its counterparty and its context node share one allocation a
// batch; apart, they cost two more a record).
func TestEventDecodeAllocationsPerRecord(t *testing.T) {
	const n = 500
	ws := event.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	in := make(service.MessageBatch, n)
	for i := range in {
		in[i] = service.NewMessage(loadgenLike(t, ws, i))
	}
	d := &eventDecode{kind: event.KindTransaction, table: "transactions", duration: stageTimes{}}
	work := make(service.MessageBatch, n)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(5, func() {
		copy(work, in)
		out, _ := d.ProcessBatch(ctx, work)
		if err := out[0][n-1].GetError(); err != nil {
			t.Fatalf("a loadgen record was flagged: %v", err)
		}
	})
	t.Logf("event_decode: %.2f allocations per record", allocs/n)
	if limit := float64((maxDecodeAllocsPerRecord+raceAllocsPerRecord)*n + decodeAllocsPerBatch); allocs > limit {
		t.Errorf("event_decode allocates %.0f times for %d records, more than %.0f (%d a record)", allocs, n, limit, maxDecodeAllocsPerRecord+raceAllocsPerRecord)
	}
	env, err := eventmsg.Of(work[7], event.KindTransaction)
	if err != nil || env.ExternalID != "txn-000007" || env.Counterparty == nil || env.Counterparty.Name != "Acme GmbH" {
		t.Errorf("record 7's envelope = %+v, %v", env, err)
	}
}
