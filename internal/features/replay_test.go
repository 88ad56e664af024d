package features

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

// A replay inside the TTL gets exactly the features its first application
// returned, per entity, however many events came after it, and changes no
// total; so does a batch applied again because the reply of its successful
// write was lost.
func TestReplayGetsItsFirstFeatures(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			s := New(c, Options{KeyPrefix: prefix})
			ctx := context.Background()
			evs := realistic(900, 40, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), 11)
			// Slower than the stream: minutes apart, so windows move.
			for i, e := range evs {
				e.OccurredAt = e.OccurredAt.Add(time.Duration(i) * 20 * time.Second)
			}
			first, err := s.Apply(ctx, evs[:300])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Apply(ctx, evs[300:600]); err != nil {
				t.Fatal(err)
			}
			before := readEntities(t, s, evs[:600])
			check := func(what string, batch []*event.Envelope) {
				t.Helper()
				again, replayed, err := s.ApplyReplays(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 300 {
					if !replayed[i] {
						t.Fatalf("%s: event %d not reported as a replay", what, i)
					}
					if !reflect.DeepEqual(again[i], first[i]) {
						t.Fatalf("%s: replayed event %d:\n%s", what, i, diff(again[i], first[i]))
					}
				}
			}
			check("the first batch again", evs[:300])
			if after := readEntities(t, s, evs[:600]); !reflect.DeepEqual(before, after) {
				t.Fatal("a replay changed the totals")
			}
			// Again, with new events in the same batch (they count).
			check("with new events", append(append([]*event.Envelope{}, evs[:300]...), evs[600:700]...))
			if restored, missing := s.Snapshots(); restored == 0 || missing != 0 {
				t.Fatalf("snapshots restored %d, missing %d", restored, missing)
			}

			// The write succeeded but its reply was lost: the same batch again.
			lost := evs[700:900]
			want, err := s.Apply(ctx, lost)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Apply(ctx, lost)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				for i := range got {
					if !reflect.DeepEqual(got[i], want[i]) {
						t.Fatalf("batch applied again, event %d:\n%s", i, diff(got[i], want[i]))
					}
				}
			}
		})
	}
}

// readEntities reads every account, customer and counterparty of evs.
func readEntities(t *testing.T, s *Store, evs []*event.Envelope) map[string]map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]map[string]any{}
	for _, e := range evs {
		var err error
		if e.AccountExternalID != "" {
			if out["a"+e.AccountExternalID], err = s.ReadAccount(ctx, testWorkspace, e.AccountExternalID, "EUR"); err != nil {
				t.Fatal(err)
			}
		}
		if out["c"+e.CustomerExternalID], err = s.ReadCustomer(ctx, testWorkspace, e.CustomerExternalID, "EUR"); err != nil {
			t.Fatal(err)
		}
		if e.Counterparty != nil {
			if out["p"+e.Counterparty.Fingerprint], err = s.ReadCounterparty(ctx, testWorkspace, e.Counterparty.Fingerprint, "EUR"); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// Snapshots live as long as the state remembers their events: once the
// replay TTL has passed the event counts again (with new features and a
// new snapshot), the forgotten snapshot is deleted, and a snapshot hash
// not written for the TTL (plus the margin) is gone.
func TestSnapshotsExpireWithTheReplayTTL(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			s := New(c, Options{KeyPrefix: prefix, ReplayTTL: 1500 * time.Millisecond})
			s.snapMargin = 0
			ctx := context.Background()
			at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
			e := txn("t1", "acc", "cust", "fp", "10.50", "EUR", event.DirectionOut, at)
			f := txn("t2", "acc", "cust", "fp", "1.00", "EUR", event.DirectionOut, at.Add(time.Minute))
			first, err := s.Apply(ctx, []*event.Envelope{e})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Apply(ctx, []*event.Envelope{f}); err != nil {
				t.Fatal(err)
			}
			hkey := snapKey(s.key(entityAccount, event.AccountID(testWorkspace, "acc")))
			if n := c.HLen(ctx, hkey).Val(); n != 2 {
				t.Fatalf("account snapshot hash holds %d, want 2", n)
			}
			if ttl := c.PTTL(ctx, hkey).Val(); ttl <= 0 || ttl > 2*time.Second {
				t.Fatalf("snapshot hash TTL %v, want at most the replay TTL rounded up", ttl)
			}
			time.Sleep(1700 * time.Millisecond)
			again, err := s.Apply(ctx, []*event.Envelope{e})
			if err != nil {
				t.Fatal(err)
			}
			a := again[0]["account"].(map[string]any)
			if a["out_count_1h"] != int64(3) || reflect.DeepEqual(again[0], first[0]) {
				t.Fatalf("after the TTL the event should count again: %v", a)
			}
			// t2's snapshot went with t2's memory; t1's is the new one.
			if n := c.HLen(ctx, hkey).Val(); n != 1 {
				t.Fatalf("account snapshot hash holds %d after the TTL, want 1", n)
			}
			time.Sleep(2100 * time.Millisecond)
			if n, err := c.Exists(ctx, hkey).Result(); err != nil || n != 0 {
				t.Fatalf("snapshot hash still there after its TTL (%d, %v)", n, err)
			}
			// Without its snapshot (gone, or written by an older version)
			// a replay falls back to the features as they are now.
			s2 := New(c, Options{KeyPrefix: prefix})
			if _, err := s2.Apply(ctx, []*event.Envelope{f}); err != nil {
				t.Fatal(err)
			}
			c.Del(ctx, hkey)
			if _, err := s2.Apply(ctx, []*event.Envelope{f}); err != nil {
				t.Fatal(err)
			}
			if _, missing := s2.Snapshots(); missing != 1 {
				t.Fatalf("missing snapshots %d, want 1 (the account's)", missing)
			}
		})
	}
}

// A batch with replays is one round trip more: the snapshots of every
// replayed entity in one pipeline (per master on a Cluster).
func TestThreeRoundTripsWithReplays(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, cnt := open(t, tg)
			s := New(c, Options{KeyPrefix: prefix})
			ctx := context.Background()
			evs := realistic(1400, 300, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), 7)
			if _, err := s.Apply(ctx, evs[:1200]); err != nil {
				t.Fatal(err)
			}
			batch := append(append([]*event.Envelope{}, evs[1200:1400]...), evs[200:300]...)
			cnt.reset()
			if _, err := s.Apply(ctx, batch); err != nil {
				t.Fatal(err)
			}
			want := int64(3)
			if _, ok := c.(*redis.ClusterClient); ok {
				want = 9
			}
			if p := cnt.pipelines.Load(); p != want {
				t.Errorf("%d pipelines for a batch with replays, want %d", p, want)
			}
			if n := cnt.single.Load(); n != 0 {
				t.Errorf("%d commands outside the pipelines", n)
			}
		})
	}
}

// A write leaves the snapshot hash's TTL as this process set it within the
// last quarter of the replay TTL (snapRefresh), and every snapshot still
// lives at least the replay TTL after its write; past that quarter a write
// sets it again.
func TestSnapshotHashTTLRefreshedAQuarterTTLApart(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			ttl := 4 * time.Second
			s := New(c, Options{KeyPrefix: prefix, ReplayTTL: ttl})
			s.snapMargin = 0
			ctx := context.Background()
			at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
			hkey := snapKey(s.key(entityAccount, event.AccountID(testWorkspace, "acc")))
			apply := func(id string, k int) time.Duration {
				t.Helper()
				e := txn(id, "acc", "cust", "fp", "1.00", "EUR", event.DirectionOut, at.Add(time.Duration(k)*time.Second))
				if _, err := s.Apply(ctx, []*event.Envelope{e}); err != nil {
					t.Fatal(err)
				}
				return c.PTTL(ctx, hkey).Val()
			}
			first := apply("t1", 0) // 5 s: the TTL and its quarter, rounded up
			if first <= 4*time.Second || first > 5*time.Second {
				t.Fatalf("snapshot hash TTL %v after the first write, want (4 s, 5 s]", first)
			}
			time.Sleep(400 * time.Millisecond)
			kept := apply("t2", 1)
			if kept >= first-300*time.Millisecond || kept < ttl {
				t.Fatalf("TTL %v after a write 0.4 s later, want it left (about %v) and still at least the replay TTL", kept, first-400*time.Millisecond)
			}
			time.Sleep(800 * time.Millisecond)
			again := apply("t3", 2)
			if again <= kept {
				t.Fatalf("TTL %v after a write past a quarter of the replay TTL, want it set again (was %v)", again, kept)
			}
			if n := c.HLen(ctx, hkey).Val(); n != 3 {
				t.Fatalf("snapshot hash holds %d, want 3", n)
			}
		})
	}
}
