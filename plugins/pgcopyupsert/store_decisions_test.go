package pgcopyupsert

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// decidedAs is a txnBatch tweak giving each transaction the decision outcome
// with score.
func decidedAs(outcome event.Outcome, score float64) func(*event.Envelope) {
	return func(e *event.Envelope) {
		e.Decision = &event.Decision{Outcome: outcome, Score: score, DecidedAt: e.OccurredAt.Add(time.Second)}
	}
}

// A transaction stored without a decision (ingested, then decided) gets the
// decision its decided copy carries; one decided already keeps its first
// decision, as its decisions row does, whatever a later copy carries. The
// staged write of a replay does this; the first delivery's COPY needs
// nothing of it.
func TestDecidedCopyDecidesTheStoredTransaction(t *testing.T) {
	h := newHarness(t, tableTransactions)
	h.write(txnBatch(t, h.ws, 0, 4, nil))
	h.write(txnBatch(t, h.ws, 0, 2, decidedAs(event.OutcomeReview, 40)))
	h.write(txnBatch(t, h.ws, 0, 1, decidedAs(event.OutcomeDecline, 90)))

	want := map[string]string{"txn-000000": "review", "txn-000001": "review", "txn-000002": "", "txn-000003": ""}
	rows, err := h.conn.Query(context.Background(), `
SELECT t.external_id, coalesce(t.decision, ''), coalesce(t.decision_score, 0)::float8, t.decided_at IS NOT NULL,
       coalesce(d.decision, '')
  FROM speculapro.transactions t LEFT JOIN speculapro.decisions d ON d.transaction_id = t.id
 WHERE t.workspace_id = $1`, h.ws)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var ext, decision, stored string
		var score float64
		var decided bool
		if err := rows.Scan(&ext, &decision, &score, &decided, &stored); err != nil {
			t.Fatal(err)
		}
		n++
		if decision != want[ext] || stored != want[ext] || decided != (want[ext] != "") || (decided && score != 40) {
			t.Errorf("%s: decision %q (score %v, decided_at set %v), decisions row %q; want %q on both", ext, decision, score, decided, stored, want[ext])
		}
	}
	if n != len(want) {
		t.Errorf("%d transactions stored, want %d", n, len(want))
	}
}

// Every row keeps the content hash of its record, the one the ingest API
// compares a resend with: by the first delivery's COPY and by a replay's
// staged write alike, for transactions and account events.
func TestRowsKeepTheirContentHash(t *testing.T) {
	h := newHarness(t, tableTransactions)
	h.write(txnBatch(t, h.ws, 0, 2, nil))
	h.exec(`DELETE FROM speculapro.transactions WHERE external_id = 'txn-000001'`)
	h.write(txnBatch(t, h.ws, 0, 2, nil)) // a replay: staged, the deleted row stored again
	for n := range 2 {
		e := txn(h.ws, n, nil)
		var got []byte
		if err := h.conn.QueryRow(context.Background(), `SELECT content_hash FROM speculapro.transactions WHERE id = $1`, e.ID).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := event.ContentHash(&e); !bytes.Equal(got, want[:]) {
			t.Errorf("%s: content_hash %x, want %x", e.ExternalID, got, want)
		}
	}

	he := newHarness(t, tableAccountEvents)
	e := event.Envelope{V: event.Version, Kind: event.KindAccountEvent, WorkspaceID: he.ws, ExternalID: "ev-1",
		OccurredAt: baseTime, ReceivedAt: baseTime, CustomerExternalID: "cust-1", Type: "sim_swap", Attributes: []byte(`{"carrier":"T"}`)}
	e.ID = event.AccountEventID(e.WorkspaceID, e.ExternalID, e.OccurredAt)
	he.write(batchOf(t, 0, encode(t, e)))
	var got []byte
	if err := he.conn.QueryRow(context.Background(), `SELECT content_hash FROM speculapro.account_events WHERE id = $1`, e.ID).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := event.ContentHash(&e); !bytes.Equal(got, want[:]) {
		t.Errorf("account event: content_hash %x, want %x", got, want)
	}
}
