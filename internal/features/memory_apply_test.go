package features

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// Memory, the computation without Redis a backtest runs, gives every event
// exactly the features the Store (Redis) gives it, batch after batch, on
// late events, jumps beyond every window, several currencies, account events and counterparties.
func TestMemoryMatchesStore(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix})
	m := NewMemory()
	ctx := context.Background()
	// Late events up to 40 days behind, jumps beyond every window, big
	// amounts; then a busy population over many entities.
	evs := genEvents(rand.New(rand.NewPCG(7, 7)), 3000, time.Now().UTC().Add(-200*24*time.Hour))
	evs = append(evs, realistic(12000, 800, time.Now().UTC().Add(-48*time.Hour), 11)...)
	r := rand.New(rand.NewPCG(7, 8))
	compared := 0
	for off, n := 0, 0; off < len(evs); off += n {
		n = 1 + r.IntN(1500)
		batch := evs[off:min(off+n, len(evs))]
		want, err := s.Apply(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Apply(batch)
		if err != nil {
			t.Fatal(err)
		}
		for i := range batch {
			if g := got[i].Map(); !reflect.DeepEqual(g, want[i]) {
				t.Fatalf("event %d (%s): in memory %s", off+i, batch[i].Kind, diff(g, want[i]))
			}
			compared++
		}
	}
	if m.Entities() == 0 || m.Bytes() <= 0 {
		t.Fatalf("memory holds %d entities in %d bytes", m.Entities(), m.Bytes())
	}
	t.Logf("%d events compared; %d entities, %d bytes", compared, m.Entities(), m.Bytes())
}

// The documented difference of a backtest: an event the stream read again
// after its replay window was counted twice in Redis, and the events after
// it saw both; the table holds it once, so Memory, replaying the table,
// counts it once and the event after it sees one less.
func TestMemoryCountsOnceWhatTheStoreCountedAgain(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix, ReplayTTL: time.Minute})
	clock := time.Now()
	s.now = func() time.Time { return clock }
	ctx := context.Background()
	at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	first := txn("t1", "acc", "cust", "", "10", "EUR", event.DirectionOut, at)
	next := txn("t2", "acc", "cust", "", "10", "EUR", event.DirectionOut, at.Add(time.Minute))
	if _, err := s.Apply(ctx, []*event.Envelope{first}); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Minute) // beyond the replay window
	live, err := s.Apply(ctx, []*event.Envelope{first, next})
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := NewMemory().Apply([]*event.Envelope{first, next})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := live[1]["account"].(map[string]any)["out_count_1h"], int64(3); got != want {
		t.Fatalf("the stream counted out_count_1h %v after a replay beyond its window, want %v", got, want)
	}
	if got := replayed[1].Feature("account", "out_count_1h"); got != int64(2) {
		t.Fatalf("the replay of the table counted out_count_1h %v, want 2", got)
	}
}

// Memory reuses its batch's Values: an event given where the batch before
// had a transaction gets only its own sections (an account event: the
// customer's alone), and an entity only read (a counterparty paying in)
// keeps no state.
func TestMemoryReusedValuesHoldOnlyTheirOwnSections(t *testing.T) {
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	m := NewMemory()
	out, err := m.Apply([]*event.Envelope{txn("r1", "acc", "cust", "fp-in", "5.00", "EUR", event.DirectionIn, at)})
	if err != nil {
		t.Fatal(err)
	}
	if !out[0].Has("account") || !out[0].Has("counterparty") || m.Entities() != 2 {
		t.Fatalf("a transaction paid in: sections %v, %d entities kept (want account and customer)", out[0].Map(), m.Entities())
	}
	ae := &event.Envelope{V: 1, Kind: event.KindAccountEvent, ID: event.AccountEventID(testWorkspace, "r2", at),
		WorkspaceID: testWorkspace, ExternalID: "r2", OccurredAt: at.Add(time.Minute), CustomerExternalID: "cust", Type: "sim_swap"}
	out, err = m.Apply([]*event.Envelope{ae})
	if err != nil {
		t.Fatal(err)
	}
	got := out[0].Map()
	if len(got) != 1 || got["customer"] == nil || out[0].Has("account") || out[0].Has("counterparty") {
		t.Fatalf("an account event after a transaction in the same slot: %v", got)
	}
	if n := got["customer"].(map[string]any)["events_1h"].(map[string]any)["sim_swap"]; n != int64(1) {
		t.Fatalf("sim_swap in the hour: %v, want 1", n)
	}
}
