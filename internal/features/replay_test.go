package features

import (
	"context"
	"errors"
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

// snapStrings returns the snapshot strings of the entity whose key is key
// that exist now (by key), and how many records they hold: those of the
// slots from a minute ago to a minute past the replay TTL.
func snapStrings(t *testing.T, c redis.UniversalClient, s *Store, key string) (map[string]string, int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	out, n := map[string]string{}, 0
	// One probe per slot from a minute ago to a whole slot past the
	// latest expiry (now + ttl): stopping a minute past it would miss that
	// expiry's slot whenever it begins in the last minute before now + ttl.
	for at := now - time.Minute.Milliseconds(); at <= now+(s.ttl+s.snapSlot).Milliseconds(); at += s.snapSlot.Milliseconds() {
		k, _ := s.snapKey(key, at)
		v, err := c.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[k] = v
		for len(v) > 0 {
			l, w := uvarintString(v[8:])
			v = v[8+w+int(l):]
			n++
		}
	}
	return out, n
}

// Snapshots live as long as the state remembers their events: each goes
// to the string of its expiry's slot, which expires (whole) after the
// slot's end; once the replay TTL has passed the event counts again, with
// new features and a new snapshot.
func TestSnapshotsExpireWithTheReplayTTL(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			ttl := 1500 * time.Millisecond
			s := New(c, Options{KeyPrefix: prefix, ReplayTTL: ttl})
			s.snapMargin, s.snapSlot = 0, time.Second
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
			key := s.key(entityAccount, event.AccountID(testWorkspace, "acc"))
			strs, n := snapStrings(t, c, s, key)
			if n != 2 {
				t.Fatalf("account snapshot strings hold %d snapshots, want 2", n)
			}
			for k := range strs {
				if d := c.PTTL(ctx, k).Val(); d <= 0 || d > ttl+s.snapSlot {
					t.Fatalf("snapshot string TTL %v, want at most the replay TTL and a slot", d)
				}
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
			time.Sleep(2700 * time.Millisecond)
			if strs, _ := snapStrings(t, c, s, key); len(strs) != 0 {
				t.Fatalf("%d snapshot strings still there after their TTL", len(strs))
			}
			// Without its snapshot (gone, or written by an older version)
			// a replay falls back to the features as they are now.
			s2 := New(c, Options{KeyPrefix: prefix})
			if _, err := s2.Apply(ctx, []*event.Envelope{f}); err != nil {
				t.Fatal(err)
			}
			strs, _ = snapStrings(t, c, s2, key)
			if len(strs) != 1 {
				t.Fatalf("%d account snapshot strings after one write, want 1", len(strs))
			}
			for k := range strs {
				c.Del(ctx, k)
			}
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

// A snapshot string's TTL is set once, by the write that creates it, to
// its slot's end: at least as long as every event in it is remembered,
// never refreshed by the writes that append to it; a replay of an event
// written into an earlier slot finds its snapshot there.
func TestSnapshotStringsOutliveTheirEvents(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			ttl := 8 * time.Second
			s := New(c, Options{KeyPrefix: prefix, ReplayTTL: ttl})
			s.snapMargin, s.snapSlot = 0, time.Second
			ctx := context.Background()
			at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
			key := s.key(entityAccount, event.AccountID(testWorkspace, "acc"))
			var evs []*event.Envelope
			var firsts []map[string]any
			ends := map[string]time.Time{}
			for k, id := range []string{"t1", "t2", "t3", "t4"} {
				e := txn(id, "acc", "cust", "fp", "1.00", "EUR", event.DirectionOut, at.Add(time.Duration(k)*time.Second))
				before := time.Now()
				out, err := s.Apply(ctx, []*event.Envelope{e})
				if err != nil {
					t.Fatal(err)
				}
				evs, firsts = append(evs, e), append(firsts, out[0])
				strs, _ := snapStrings(t, c, s, key)
				for k := range strs {
					end := time.Now().Add(c.PTTL(ctx, k).Val())
					if was, ok := ends[k]; ok && end.Sub(was).Abs() > 500*time.Millisecond {
						t.Fatalf("snapshot string %s: its expiry moved from %v to %v", k, was, end)
					}
					if _, ok := ends[k]; !ok {
						ends[k] = end
					}
				}
				// This event is remembered until about before + ttl: its
				// snapshot's string must outlive that.
				var latest time.Time
				for _, end := range ends {
					if end.After(latest) {
						latest = end
					}
				}
				if latest.Before(before.Add(ttl)) {
					t.Fatalf("after %s the latest snapshot string expires at %v, before the event is forgotten (%v)", id, latest, before.Add(ttl))
				}
				time.Sleep(600 * time.Millisecond)
			}
			if _, n := snapStrings(t, c, s, key); n != 4 {
				t.Fatalf("snapshot strings hold %d snapshots, want 4", n)
			}
			again, replayed, err := s.ApplyReplays(ctx, evs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range evs {
				if !replayed[i] || !reflect.DeepEqual(again[i], firsts[i]) {
					t.Fatalf("replay of %d: replayed %v, features %v, want %v", i, replayed[i], again[i], firsts[i])
				}
			}
			if restored, missing := s.Snapshots(); restored == 0 || missing != 0 {
				t.Fatalf("snapshots restored %d, missing %d", restored, missing)
			}
		})
	}
}
