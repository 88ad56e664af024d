package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
)

func TestEventDecodeConfig(t *testing.T) {
	for _, tt := range []struct {
		yaml    string
		wantErr bool
	}{
		{"kind: transaction", false},
		{"kind: account_event", false},
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

// The output must use what the processor decoded, not decode again, and must
// see a flagged record as flagged.
func TestEventDecodeHandsEnvelopeToOutput(t *testing.T) {
	ws := event.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	good := encode(t, txn(ws, 1, nil))
	d := &eventDecode{kind: event.KindTransaction, table: tableTransactions, duration: fakeCounter{&fakeCounters{n: map[string]int64{}}, "stage"}}
	out, err := d.ProcessBatch(context.Background(), service.MessageBatch{service.NewMessage(good), service.NewMessage([]byte("{"))})
	if err != nil || len(out) != 1 || len(out[0]) != 2 {
		t.Fatalf("ProcessBatch: %v, %v", out, err)
	}
	first, err := envelopeOf(out[0][0], event.KindTransaction)
	if err != nil || first.ExternalID != "txn-000001" {
		t.Fatalf("envelopeOf(good) = %+v, %v", first, err)
	}
	if again, _ := envelopeOf(out[0][0], event.KindTransaction); again != first {
		t.Errorf("the output decoded again instead of using the processor's envelope")
	}
	if err := out[0][1].GetError(); !errors.Is(err, event.ErrNotJSON) {
		t.Errorf("flag on a broken record = %v, want ErrNotJSON", err)
	}
	if raw, _ := out[0][0].AsBytes(); string(raw) != string(good) {
		t.Errorf("the processor changed the record's content")
	}
}

// BenchmarkEventDecode5000 is the per-batch decode work the event_decode
// processor takes off the output's writer (compare with the write time
// TestBatchOf5000 logs).
func BenchmarkEventDecode5000(b *testing.B) {
	ws := event.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	raw := make([][]byte, 5000)
	for i := range raw {
		raw[i] = encode(b, txn(ws, i, func(e *event.Envelope) {
			e.Counterparty = &event.Counterparty{Name: "Hausverwaltung Müller GmbH", IdentifierKind: "iban",
				IdentifierEnc:    "k1:q83vEjRWeJq8Ad4K5bH1m2p0c3E5Zy8xVQ7kGm3s0n9wYb1dXc6T2uLrHqP4oNfA2aZ8==",
				IdentifierMasked: "DE89 **** **** **** 3000", Fingerprint: "0c9e8f7a65d41402abc4b2a76b9719d911017c592b6f0e0c9c6a1d7e4f3a2b1d"}
		}))
	}
	b.ResetTimer()
	for range b.N {
		for _, r := range raw {
			if _, err := event.Decode(r); err != nil {
				b.Fatal(err)
			}
		}
	}
}
