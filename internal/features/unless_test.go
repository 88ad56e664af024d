package features

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// ApplyValuesUnless reads the events' keys with the entities, in the same
// pipelines as a batch without them, leaves every event whose key holds a
// value unapplied (its value returned), and applies the others exactly as
// ApplyValues applies them alone.
func TestApplyValuesUnlessSkipsTheHeld(t *testing.T) {
	c, prefix, cnt := open(t, targets[0])
	ctx := context.Background()
	evs := realistic(600, 60, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), 3)
	keys := make([]string, len(evs))
	for i := range evs {
		keys[i] = fmt.Sprintf("%sans:%d", prefix, i)
	}
	s := New(c, Options{KeyPrefix: prefix + "u:", CacheBytes: -1})
	// A first batch with no key held: the same two pipelines (reads,
	// writes) as without keys.
	cnt.reset()
	got, held, err := s.ApplyValuesUnless(ctx, evs[:300], keys[:300])
	if err != nil {
		t.Fatal(err)
	}
	if held != nil {
		t.Fatalf("held %d values, none was set", len(held))
	}
	// A Redis that has not seen the script yet takes it in a third
	// (NOSCRIPT, then EVAL).
	if p := cnt.pipelines.Load(); p != 2 && p != 3 {
		t.Errorf("%d pipelines for one batch, want 2", p)
	}
	// Then a batch in which every 7th event was answered before.
	for i := 300; i < len(evs); i += 7 {
		if err := c.Set(ctx, keys[i], fmt.Sprintf("answer %d", i), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rest, restOut := []*event.Envelope{}, []*Values{}
	got2, held, err := s.ApplyValuesUnless(ctx, evs[300:], keys[300:])
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs[300:] {
		want := (300+i)%7 == 300%7
		switch {
		case want && string(held[i]) != fmt.Sprintf("answer %d", 300+i):
			t.Fatalf("event %d: held %q", 300+i, held[i])
		case want && got2[i] != nil:
			t.Fatalf("event %d answered before, applied all the same", 300+i)
		case !want && (held[i] != nil || got2[i] == nil):
			t.Fatalf("event %d: held %q, features %v", 300+i, held[i], got2[i])
		case !want:
			rest, restOut = append(rest, evs[300+i]), append(restOut, got2[i])
		}
	}
	// The same events without the held ones, on a Store of their own.
	ref := New(c, Options{KeyPrefix: prefix + "r:", CacheBytes: -1})
	want1, _, err := ref.ApplyValues(ctx, evs[:300])
	if err != nil {
		t.Fatal(err)
	}
	want2, _, err := ref.ApplyValues(ctx, rest)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want1 {
		if d := diff(got[i].Map(), want1[i].Map()); d != "" {
			t.Fatalf("first batch, event %d: %s", i, d)
		}
	}
	for i := range want2 {
		if d := diff(restOut[i].Map(), want2[i].Map()); d != "" {
			t.Fatalf("second batch, event %d not held: %s", i, d)
		}
	}
}

// A counterparty only read (paying in) comes from the cache when Redis
// still holds the generation the cache does (one GETRANGE, not its whole
// value), and from Redis when another writer changed it since.
func TestReadOnlyEntityFromCacheIsChecked(t *testing.T) {
	c, prefix, cnt := open(t, targets[0])
	ctx := context.Background()
	s, other := New(c, Options{KeyPrefix: prefix}), New(c, Options{KeyPrefix: prefix})
	at := time.Now().UTC().Add(-time.Minute)
	paid := func(s *Store, ext string, dir event.Direction) map[string]any {
		t.Helper()
		out, err := s.Apply(ctx, []*event.Envelope{txn(ext, "acc-"+ext, "", "payee", "10.00", "EUR", dir, at)})
		if err != nil {
			t.Fatal(err)
		}
		return out[0]["counterparty"].(map[string]any)
	}
	paid(s, "1", event.DirectionOut) // written by s: in its cache
	cnt.reset()
	hits0, reads0 := s.CacheStats()
	if got := paid(s, "2", event.DirectionIn)["paid_count_24h"]; got != int64(1) {
		t.Fatalf("paid_count_24h %v after one payment, want 1", got)
	}
	if hits, reads := s.CacheStats(); hits-hits0 != 1 || reads-reads0 != 1 {
		// The payee from the cache; the new account read.
		t.Errorf("cache hits %d, reads %d; want the payee from the cache", hits-hits0, reads-reads0)
	}
	paid(other, "3", event.DirectionOut) // another writer: s's cache is behind
	if got := paid(s, "4", event.DirectionIn)["paid_count_24h"]; got != int64(2) {
		t.Fatalf("paid_count_24h %v after another writer's payment, want 2", got)
	}
	if got := paid(s, "5", event.DirectionIn)["paid_count_24h"]; got != int64(2) {
		t.Fatalf("paid_count_24h %v, want 2", got)
	}
}
