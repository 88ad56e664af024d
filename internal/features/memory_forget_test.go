package features

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

// A documented difference of a backtest: the running totals in Redis
// forget an entity silent for 31 days of wall-clock time (its keys' TTL,
// set from the wall clock whatever the events' occurred_at), while Memory,
// replaying the stored history, forgets nothing. An event accepted after
// such a silence but dated within 30 days of the forgotten events (late, or
// a backfill) sees them in the replay and not in the stream; an event dated
// after the silence sees the same in both, since no window reaches back 31
// days.
func TestMemoryRemembersWhatRedisForgot(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix})
	ctx := context.Background()
	// Dated long before the wall clock: the TTL does not follow occurred_at.
	at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	first := txn("forgot-1", "acc", "cust", "fp", "10", "EUR", event.DirectionOut, at)
	firstB := txn("forgot-b1", "acc-b", "cust-b", "fp-b", "10", "EUR", event.DirectionOut, at)
	if _, err := s.Apply(ctx, []*event.Envelope{first, firstB}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []event.UUID{event.AccountID(testWorkspace, "acc"), event.AccountID(testWorkspace, "acc-b")} {
		if ttl := c.PTTL(ctx, s.key(entityAccount, id)).Val(); ttl <= keyTTL-time.Minute || ttl > keyTTL {
			t.Fatalf("an account's key expires in %v, want the 31 days of keyTTL from the wall clock", ttl)
		}
	}
	// 31 silent days of wall-clock time: every key's TTL runs out, here
	// shortened to what it then does.
	forgetAll(t, c, prefix)

	late := txn("forgot-2", "acc", "cust", "fp", "10", "EUR", event.DirectionOut, at.Add(time.Hour))
	afterB := txn("forgot-b2", "acc-b", "cust-b", "fp-b", "10", "EUR", event.DirectionOut, at.Add(32*24*time.Hour))
	live, err := s.Apply(ctx, []*event.Envelope{late, afterB})
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := NewMemory().Apply([]*event.Envelope{first, firstB, late, afterB})
	if err != nil {
		t.Fatal(err)
	}
	// The late event: the stream starts from zero, the replay counts the
	// event of an hour before.
	for _, f := range []struct {
		sec, name  string
		live, memo any
	}{
		{"account", "out_count_24h", int64(1), int64(2)},
		{"account", "seconds_since_previous", int64(-1), int64(3600)},
		{"account", "new_counterparty", true, false},
		{"customer", "out_count_24h", int64(1), int64(2)},
		{"counterparty", "paid_count_24h", int64(1), int64(2)},
	} {
		got, ok := live[0][f.sec].(map[string]any)
		if !ok || got[f.name] != f.live {
			t.Errorf("stream, after the silence: %s.%s = %v, want %v", f.sec, f.name, got[f.name], f.live)
		}
		if v := replayed[2].Feature(f.sec, f.name); v != f.memo {
			t.Errorf("replay: %s.%s = %v, want %v", f.sec, f.name, v, f.memo)
		}
	}
	// The event dated after the silence: the same features both ways.
	if got := replayed[3].Map(); !reflect.DeepEqual(got, live[1]) {
		t.Errorf("an event dated after the silence: replay %s", diff(got, live[1]))
	}
}

// forgetAll makes every key under prefix expire now, as its TTL does after
// 31 days without a write, and waits until Redis has dropped them.
func forgetAll(t *testing.T, c redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("%d keys under %s (%v)", len(keys), prefix, err)
	}
	for _, k := range keys {
		if err := c.PExpire(ctx, k, time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range 200 {
		if n := c.Exists(ctx, keys...).Val(); n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("keys under %s still there a second after they expired", prefix)
}
