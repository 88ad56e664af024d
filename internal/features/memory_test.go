package features

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

// TestMemoryPerAccount measures the Redis memory of the running totals per
// monitored account (docs/running-totals.md): 30 days of
// traffic for 1,000 accounts, one customer each, then MEMORY USAGE (exact,
// SAMPLES 0) of every key, summed per entity kind. A measurement, not a
// check, so a benchmark (make bench runs it):
//
//	go test -run '^$' -bench MemoryPerAccount -benchtime 1x -v ./internal/features/
//
// Traffic per account and day: 8 transactions (60 % out, 40 % in, amounts up
// to 2,000.00 EUR, 10 % in USD), 90 % to or from one of its 25 usual
// counterparties, 10 % to one never seen before, and 2 account events; times
// spread over the day. All events are applied within minutes of wall-clock
// time, so every value still remembers every event id; that share is
// reported apart, since in steady state a value only remembers the events
// of the last SP_STREAM_REPLAY_TTL of wall-clock time.
func BenchmarkMemoryPerAccount(b *testing.B) {
	t := b
	const accounts, days, txPerDay, aePerDay = 1000, 30, 8, 2
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix})
	ctx := context.Background()
	r := rand.New(rand.NewPCG(30, 1000))
	start := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	types := []string{"sign_in", "sign_in", "failed_otp", "device_change", "sim_swap", "profile_change"}
	var batch []*event.Envelope
	n := 0
	flush := func() {
		if _, err := s.Apply(ctx, batch); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for d := range days {
		// One day's events of every account, in time order.
		var day []*event.Envelope
		for a := range accounts {
			for k := range txPerDay + aePerDay {
				at := start.Add(time.Duration(d)*24*time.Hour + time.Duration(r.IntN(86400))*time.Second)
				n++
				ext := fmt.Sprintf("m-%d", n)
				cust := fmt.Sprintf("cust-%d", a)
				if k >= txPerDay {
					day = append(day, &event.Envelope{V: 1, Kind: event.KindAccountEvent, ID: event.AccountEventID(testWorkspace, ext, at),
						WorkspaceID: testWorkspace, ExternalID: ext, OccurredAt: at, CustomerExternalID: cust, Type: types[r.IntN(len(types))]})
					continue
				}
				dir := event.DirectionOut
				if r.IntN(10) < 4 {
					dir = event.DirectionIn
				}
				cur := "EUR"
				if r.IntN(10) == 0 {
					cur = "USD"
				}
				fp := fmt.Sprintf("fp-%d-%d", a, r.IntN(25))
				if r.IntN(10) == 0 {
					fp = fmt.Sprintf("fp-new-%d", n)
				}
				e := txn(ext, fmt.Sprintf("acc-%d", a), cust, fp, fmt.Sprintf("%d.%02d", r.IntN(2000), r.IntN(100)), cur, dir, at)
				day = append(day, e)
			}
		}
		sort.Slice(day, func(i, j int) bool { return day[i].OccurredAt.Before(day[j].OccurredAt) })
		for _, e := range day {
			batch = append(batch, e)
			if len(batch) == 1000 {
				flush()
			}
		}
	}
	flush()

	// MEMORY USAGE of every key, by entity kind; the replay memory's share
	// of each value is its encoded size (the value less the value without it).
	sum := map[string]int64{}
	count := map[string]int64{}
	var replay, maxValue int64
	// The replay snapshots (…:r:<slot> strings), by entity kind: their
	// MEMORY USAGE, strings, snapshots and the snapshots' own bytes.
	snapMem, snapStrs, snapFields, snapBytes := map[string]int64{}, map[string]int64{}, map[string]int64{}, map[string]int64{}
	iter := c.(*redis.Client).Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		b, err := c.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		kind := strings.TrimPrefix(k, prefix+"{")[:1]
		if strings.Contains(k, snapSuffix) {
			v, err := c.Get(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			snapMem[kind] += b
			snapStrs[kind]++
			for len(v) > 0 {
				l, w := uvarintString(v[8:])
				snapFields[kind]++
				snapBytes[kind] += int64(l)
				v = v[8+w+int(l):]
			}
			continue
		}
		v, err := c.Get(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		st, err := decode(v)
		if err != nil {
			t.Fatal(err)
		}
		st.seen = table[uint64]{}
		replay += int64(len(v) - len(encode(nil, 0, st)))
		maxValue = max(maxValue, int64(len(v)))
		sum[kind] += b
		count[kind]++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var total int64
	for k := range sum {
		kinds = append(kinds, k)
		total += sum[k]
	}
	sort.Strings(kinds)
	t.Logf("%d events (%d days x %d accounts x %d/day)", n, days, accounts, txPerDay+aePerDay)
	for _, k := range kinds {
		t.Logf("%-2s %6d keys  %9d bytes  %6d bytes/key  %6d bytes/account", k, count[k], sum[k], sum[k]/count[k], sum[k]/accounts)
	}
	t.Logf("total %d bytes = %d bytes per account; of which replay memory (all %d events remembered) %d bytes per account; without it %d bytes per account; largest value %d bytes",
		total, total/accounts, n, replay/accounts, (total-replay)/accounts, maxValue)
	var sm, sf int64
	for _, k := range kinds {
		if snapFields[k] > 0 {
			t.Logf("snapshots %s: %7d in %6d strings  %5.1f bytes each  %6.1f bytes of Redis memory each", k, snapFields[k], snapStrs[k],
				float64(snapBytes[k])/float64(snapFields[k]), float64(snapMem[k])/float64(snapFields[k]))
		}
		sm += snapMem[k]
		sf += snapFields[k]
	}
	t.Logf("replay snapshots: %d bytes for %d events (%d entity sections): %.0f bytes per event",
		sm, n, sf, float64(sm)/float64(n))
}
