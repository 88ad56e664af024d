package features

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

// toFormat2 rewrites a format 3 value as the release before it wrote it:
// version 2, the generation in front only, no generation after the base or
// after each delta record.
func toFormat2(t *testing.T, v string) string {
	t.Helper()
	_, base, err := decodeBase(v)
	if err != nil || v[genLen] != formatVersion {
		t.Fatalf("not a format %d value: %v", formatVersion, err)
	}
	var b strings.Builder
	b.WriteString(v[:genLen])
	b.WriteByte(formatV2)
	b.WriteString(v[genLen+1 : base-genLen])
	for off := base; off < len(v); {
		r := &reader{s: v, off: off}
		end := r.off + int(r.uvarint())
		if r.err != nil || end+genLen > len(v) {
			t.Fatalf("delta record at byte %d: %v", off, r.err)
		}
		b.WriteString(v[off:end])
		off = end + genLen
	}
	return b.String()
}

// Values written by the release before (format 2: the generation in front,
// records without one) are read as they were, give the same features as
// values that were never in it, and the next write of each rewrites it
// whole in format 3, decoding to the writer's state.
func TestFormat2ValuesAreReadAndRewritten(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			ctx := context.Background()
			clock := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
			now := func() time.Time { return clock }
			old, ref := New(c, Options{KeyPrefix: prefix}), New(c, Options{KeyPrefix: prefix + "ref:"})
			old.now, ref.now = now, now
			evs := realistic(2400, 30, clock, 5)
			for off := 0; off < 1200; off += 150 {
				for _, s := range []*Store{old, ref} {
					if _, err := s.Apply(ctx, evs[off:off+150]); err != nil {
						t.Fatal(err)
					}
				}
				clock = clock.Add(3 * time.Minute)
			}
			converted, withRecords := map[string]string{}, 0
			for _, x := range old.cache.m {
				k := x.key
				v, err := c.Get(ctx, k).Result()
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				v2 := toFormat2(t, v)
				if _, base, _ := decodeBase(v); base < len(v) {
					withRecords++
				}
				st2, err := decode(v2)
				if err != nil {
					t.Fatalf("%s: the format 2 value does not decode: %v", k, err)
				}
				st3, _ := decode(v)
				if string(encode(nil, 1, st2)) != string(encode(nil, 1, st3)) {
					t.Fatalf("%s: format 2 and 3 of one value decode to different states", k)
				}
				if err := c.Set(ctx, k, v2, redis.KeepTTL).Err(); err != nil {
					t.Fatal(err)
				}
				converted[k] = v2
			}
			if len(converted) == 0 || withRecords == 0 {
				t.Fatalf("%d values converted, %d with delta records: nothing proven", len(converted), withRecords)
			}
			// A new process: nothing cached, every value read from Redis.
			s := New(c, Options{KeyPrefix: prefix})
			s.now = now
			for off := 1200; off < len(evs); off += 150 {
				batch := evs[off : off+150]
				if off == 1200 {
					// Replays of events counted before the conversion.
					batch = append(append([]*event.Envelope(nil), evs[off-30:off]...), batch...)
				}
				got, err := s.Apply(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				want, err := ref.Apply(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if d := diff(got[i], want[i]); d != "" {
						t.Fatalf("batch at %d, event %d: %s", off, i, d)
					}
				}
				clock = clock.Add(3 * time.Minute)
			}
			rewritten := 0
			for _, x := range s.cache.m {
				k := x.key
				v, err := c.Get(ctx, k).Result()
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				if v == converted[k] {
					continue // only read since (a counterparty paying in)
				}
				if v[genLen] != formatVersion {
					t.Fatalf("%s: still format %d after a write", k, v[genLen])
				}
				rewritten++
				rv, err := c.Get(ctx, strings.Replace(k, prefix, prefix+"ref:", 1)).Result()
				if err != nil {
					t.Fatalf("%s (reference): %v", k, err)
				}
				st, _ := decode(v)
				rst, _ := decode(rv)
				if st == nil || rst == nil || string(encode(nil, 1, st)) != string(encode(nil, 1, rst)) {
					t.Fatalf("%s: the rewritten value decodes to another state than the reference's", k)
				}
			}
			if rewritten == 0 {
				t.Fatal("no format 2 value was written again")
			}
			t.Logf("%d format 2 values (%d with delta records), %d rewritten", len(converted), withRecords, rewritten)
		})
	}
}

// beforeWrite runs fn once, just before the first pipeline that runs a
// script: between a Store's read and its write.
type beforeWrite struct {
	once sync.Once
	fn   func()
}

func (h *beforeWrite) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *beforeWrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *beforeWrite) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if n := c.Name(); n == "evalsha" || n == "eval" {
				h.once.Do(h.fn)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// A format 2 value keeps its generation in front: a writer that read it
// loses its CAS to another that rewrote it (in format 3) in between, and
// counts its events again on the new value.
func TestFormat2ValueCASCatchesASecondWriter(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			ctx := context.Background()
			at := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
			var first []*event.Envelope
			for i := range 40 {
				first = append(first, txn(fmt.Sprint("f", i), "acc-v2", "", fmt.Sprint("fp", i), "1.0001", "EUR", event.DirectionOut, at))
			}
			w := New(c, Options{KeyPrefix: prefix})
			if _, err := w.Apply(ctx, first); err != nil {
				t.Fatal(err)
			}
			key := w.key(entityAccount, event.AccountID(testWorkspace, "acc-v2"))
			v, err := c.Get(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, key, toFormat2(t, v), redis.KeepTTL).Err(); err != nil {
				t.Fatal(err)
			}
			other := New(second(t, tg), Options{KeyPrefix: prefix})
			a2 := second(t, tg)
			a2.AddHook(&beforeWrite{fn: func() {
				if _, err := other.Apply(ctx, []*event.Envelope{txn("b", "acc-v2", "", "fp", "2.0000", "EUR", event.DirectionOut, at)}); err != nil {
					t.Error(err)
				}
			}})
			a := New(a2, Options{KeyPrefix: prefix})
			got, err := a.Apply(ctx, []*event.Envelope{txn("a", "acc-v2", "", "fp", "3.0000", "EUR", event.DirectionOut, at)})
			if err != nil {
				t.Fatal(err)
			}
			if n := a.conflicts.Load(); n == 0 {
				t.Fatal("the second writer's write did not make the first lose its CAS")
			}
			acct := got[0]["account"].(map[string]any)
			if acct["out_count_1h"] != int64(42) || acct["out_sum_1h"] != json.Number("45.0040") {
				t.Fatalf("after both writes: %v %v, want 42 and 45.0040", acct["out_count_1h"], acct["out_sum_1h"])
			}
		})
	}
}
