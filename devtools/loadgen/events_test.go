package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/event"
)

// eventsConfig is testConfig with 2,000 account events (80 incidents).
func eventsConfig() Config {
	c := testConfig()
	c.AccountEvents = 2000
	return c
}

// Account events are as deterministic as transactions, valid envelopes
// with their fixed IDs, keyed workspace_id:customer_external_id, on the
// generator's own customers, inside the stream's time span.
func TestAccountEventsAreDeterministicValidAndKeyedByCustomer(t *testing.T) {
	cfg := eventsConfig()
	a, b := newTestGenerator(t, cfg), newTestGenerator(t, cfg)
	customers := map[string]event.UUID{}
	for _, acc := range a.Accounts() {
		customers[acc.CustomerExternalID] = acc.Workspace
	}
	received := testStart.Add(time.Minute)
	ids := map[event.UUID]bool{}
	for i := range cfg.AccountEvents {
		key, value, id, err := a.EventRecord(i, received)
		if err != nil {
			t.Fatalf("EventRecord(%d): %v", i, err)
		}
		_, again, _, _ := b.EventRecord(i, received)
		if !bytes.Equal(value, again) {
			t.Fatalf("account event %d differs between two generators of one config:\n%s\n%s", i, value, again)
		}
		e, err := event.Decode(value)
		if err != nil {
			t.Fatalf("EventRecord(%d) does not decode: %v", i, err)
		}
		if e.Kind != event.KindAccountEvent || e.ID != id || id != event.AccountEventID(e.WorkspaceID, e.ExternalID, e.OccurredAt) {
			t.Fatalf("EventRecord(%d): kind %q, id %s not AccountEventID of the envelope", i, e.Kind, id)
		}
		if ids[id] {
			t.Fatalf("EventRecord(%d): id %s repeated", i, id)
		}
		ids[id] = true
		if key != e.WorkspaceID.String()+":"+e.CustomerExternalID || key != EventKey(e) {
			t.Fatalf("EventRecord(%d): key %q", i, key)
		}
		if ws, ok := customers[e.CustomerExternalID]; !ok || ws != e.WorkspaceID {
			t.Fatalf("EventRecord(%d): customer %q of workspace %s is not one of the population's", i, e.CustomerExternalID, e.WorkspaceID)
		}
		if e.AccountExternalID != "" && !strings.HasPrefix(e.AccountExternalID, "acc-") {
			t.Fatalf("EventRecord(%d): account %q", i, e.AccountExternalID)
		}
		lo, hi := testStart.Add(-cfg.Spread-eventLateness), testStart.Add(time.Hour)
		if e.OccurredAt.Before(lo) || e.OccurredAt.After(hi) {
			t.Fatalf("EventRecord(%d): occurred_at %s outside [%s, %s]", i, e.OccurredAt, lo, hi)
		}
		var attrs map[string]string
		if err := json.Unmarshal(e.Attributes, &attrs); err != nil || attrs["ip_country"] == "" {
			t.Fatalf("EventRecord(%d): attributes %s (%v)", i, e.Attributes, err)
		}
	}
	other := cfg
	other.Seed++
	if newTestGenerator(t, other).AccountEvent(0).ID == a.AccountEvent(0).ID {
		t.Fatal("two seeds share an account event ID")
	}
}

// Event types come at realistic frequencies: sign-ins by far the most
// common, SIM swaps the rarest, each type present.
func TestAccountEventFrequencies(t *testing.T) {
	cfg := eventsConfig()
	cfg.AccountEvents = 20000
	g := newTestGenerator(t, cfg)
	byType := map[string]int{}
	for i := range cfg.AccountEvents {
		byType[g.AccountEvent(i).Type]++
	}
	share := func(typ string) float64 { return float64(byType[typ]) / float64(cfg.AccountEvents) }
	tests := []struct {
		typ    string
		lo, hi float64
	}{
		{EventSignIn, 0.70, 0.85},
		{EventFailedOTP, 0.08, 0.16},
		{EventNewDevice, 0.05, 0.09},
		{EventProfileChange, 0.02, 0.05},
		{EventSIMSwap, 0.01, 0.03},
	}
	for _, tt := range tests {
		if s := share(tt.typ); s < tt.lo || s > tt.hi {
			t.Errorf("%s: %.3f of events, want %.2f to %.2f (all: %v)", tt.typ, s, tt.lo, tt.hi, byType)
		}
	}
	if len(byType) != len(tests) {
		t.Errorf("types %v, want exactly the %d known", byType, len(tests))
	}
}

// Every incident is a burst on one customer followed by its transfers:
// large, out of one of the customer's accounts, to a mule, a minute or two
// after the burst's last event. Each kind of incident happens, SIM swaps
// and bursts of at least three failed codes among them.
func TestIncidentsAreFollowedByTransfers(t *testing.T) {
	cfg := eventsConfig()
	g := newTestGenerator(t, cfg)
	mules := map[string]bool{}
	for _, ws := range g.mules {
		for _, m := range ws {
			mules[m.cp.Fingerprint] = true
		}
	}
	// Transfers by incident, found from the transaction side.
	followUps := map[int][]event.Envelope{}
	for i := range cfg.Count {
		if k, _, ok := g.followUpOf(i); ok {
			followUps[k] = append(followUps[k], g.Envelope(i))
		}
	}
	kinds := map[string]int{}
	for k := range g.incidents() {
		inc := g.incident(k)
		kinds[inc.kind]++
		var last event.Envelope
		failedOTP := 0
		for off := range inc.events {
			e := g.AccountEvent(k*incidentStride + off)
			if off > 0 && (e.CustomerExternalID != last.CustomerExternalID || e.OccurredAt.Before(last.OccurredAt)) {
				t.Fatalf("incident %d: event %d is on another customer or earlier", k, off)
			}
			if e.Type == EventFailedOTP {
				failedOTP++
			}
			last = e
		}
		if inc.kind == EventFailedOTP && failedOTP < 3 {
			t.Fatalf("incident %d: %d failed codes, want a burst of at least 3", k, failedOTP)
		}
		txns := followUps[k]
		if len(txns) == 0 || len(txns) != len(inc.followUps) {
			t.Fatalf("incident %d (%s): %d transfers follow it, want %d", k, inc.kind, len(txns), len(inc.followUps))
		}
		prev := last.OccurredAt
		for _, x := range txns {
			gap := x.OccurredAt.Sub(prev)
			amount, _ := strconv.ParseFloat(x.Amount, 64)
			switch {
			case x.CustomerExternalID != last.CustomerExternalID || x.WorkspaceID != last.WorkspaceID:
				t.Fatalf("incident %d: transfer %s by customer %s, burst on %s", k, x.ExternalID, x.CustomerExternalID, last.CustomerExternalID)
			case x.Direction != event.DirectionOut || x.Type != "transfer" || amount < 1500:
				t.Fatalf("incident %d: transfer %s is %s %s of %s", k, x.ExternalID, x.Direction, x.Type, x.Amount)
			case gap < 45*time.Second || gap > 2*time.Minute:
				t.Fatalf("incident %d: transfer %s %s after the previous step", k, x.ExternalID, gap)
			case x.Counterparty == nil || !mules[x.Counterparty.Fingerprint]:
				t.Fatalf("incident %d: transfer %s not to a mule", k, x.ExternalID)
			}
			prev = x.OccurredAt
		}
	}
	for _, kind := range []string{EventFailedOTP, EventSIMSwap, EventNewDevice, EventProfileChange} {
		if kinds[kind] == 0 {
			t.Errorf("no %s incident among %d: %v", kind, g.incidents(), kinds)
		}
	}
}

// Account events change only the transactions that follow an incident:
// every other one is exactly what the generator makes without events, so
// the persister's tests and benchmarks see the same traffic as before.
func TestAccountEventsLeaveOtherTransactionsAlone(t *testing.T) {
	with, without := newTestGenerator(t, eventsConfig()), newTestGenerator(t, testConfig())
	changed := 0
	for i := range testConfig().Count {
		x, y := with.Envelope(i), without.Envelope(i)
		if _, _, ok := with.followUpOf(i); ok {
			changed++
			continue
		}
		if x.ID != y.ID || x.Amount != y.Amount || x.AccountExternalID != y.AccountExternalID {
			t.Fatalf("transaction %d changed by account events", i)
		}
	}
	if changed == 0 || changed > with.incidents()*maxFollowUps {
		t.Fatalf("%d transactions follow an incident, want 1 to %d", changed, with.incidents()*maxFollowUps)
	}
	if _, _, ok := without.followUpOf(0); ok || len(without.mules) != 0 {
		t.Fatal("a generator without account events has follow-ups or mules")
	}
}

// Fewer transactions than incidents can follow: incidents then share out
// what there is and no transaction is claimed twice.
func TestFollowUpsWithFewTransactions(t *testing.T) {
	for _, count := range []int{0, 1, 10, 79, 80, 200} {
		cfg := eventsConfig()
		cfg.Count = count
		g := newTestGenerator(t, cfg)
		seen := map[[2]int]bool{}
		for i := range count {
			if k, j, ok := g.followUpOf(i); ok {
				if seen[[2]int{k, j}] || g.followUpStart(k)+j != i {
					t.Fatalf("count %d: transaction %d is transfer %d of incident %d twice or out of place", count, i, j, k)
				}
				seen[[2]int{k, j}] = true
				_ = g.Envelope(i)
			}
		}
	}
}

func TestManifestRoundTripWithEvents(t *testing.T) {
	cfg := eventsConfig()
	g := newTestGenerator(t, cfg)
	path := filepath.Join(t.TempDir(), "manifest.json")
	m := NewManifest(g, 0, cfg.Count, Summary{Topic: "sp.txn.ingested", Sent: 5000, Acked: 5000}).
		WithEvents(0, cfg.AccountEvents, Summary{Topic: "sp.account.events", Kind: event.KindAccountEvent, Sent: 2000, Acked: 2000})
	if err := WriteManifest(path, m); err != nil {
		t.Fatal(err)
	}
	back, err := ReadManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Events == nil || !back.Events.Complete || back.Events.Topic != "sp.account.events" || back.Events.To != 2000 {
		t.Fatalf("manifest events %+v", back.Events)
	}
	c, err := back.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.AccountEvents != cfg.AccountEvents {
		t.Fatalf("account events %d, want %d", c.AccountEvents, cfg.AccountEvents)
	}
	h := newTestGenerator(t, c)
	for _, i := range []int{0, 1, 1999} {
		if g.AccountEvent(i).ID != h.AccountEvent(i).ID {
			t.Fatalf("account event %d recomputed from the manifest has another ID", i)
		}
	}
}

// Produce sends account events once each, under the customer key, and
// says so in its summary.
func TestProduceSendsAccountEvents(t *testing.T) {
	c, cl := fakeKafka(t, "lg.account.events")
	g := newTestGenerator(t, eventsConfig())
	s, err := Produce(context.Background(), cl, g, ProduceOptions{Topic: "lg.account.events", Kind: event.KindAccountEvent, From: 100, To: 600})
	if err != nil {
		t.Fatalf("Produce: %v", err)
	}
	if s.Acked != 500 || !strings.Contains(s.String(), "sent 500 account events to lg.account.events") {
		t.Fatalf("summary %q", s)
	}
	if _, err := Produce(context.Background(), cl, g, ProduceOptions{Topic: "x", Kind: event.KindAccountEvent, To: 2001}); err == nil {
		t.Fatal("Produce accepted more account events than the generator makes")
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("lg.account.events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	want := map[event.UUID]bool{}
	for i := 100; i < 600; i++ {
		want[g.AccountEvent(i).ID] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(want) > 0 && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			e, err := event.Decode(r.Value)
			if err != nil || !want[e.ID] || string(r.Key) != EventKey(e) {
				t.Fatalf("record %s (%v) unexpected, twice or under key %q", e.ID, err, r.Key)
			}
			delete(want, e.ID)
		})
	}
	if len(want) != 0 {
		t.Fatalf("%d account events never reached the topic", len(want))
	}
}
