package features

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

// TestMemoryPerAccount measures the Redis memory of the running totals per
// monitored account (README "Running totals (features)"): 30 days of
// traffic for 1,000 accounts, one customer each, then MEMORY USAGE (exact,
// SAMPLES 0) of every key, summed per key kind. Slow, so opt-in:
//
//	SP_TEST_FEATURES_MEMORY=1 go test -run MemoryPerAccount -v ./internal/features/
//
// Traffic per account and day: 8 transactions (60 % out, 40 % in, amounts up
// to 2,000.00 EUR, 10 % in USD), 90 % to or from one of its 25 usual
// counterparties, 10 % to one never seen before, and 2 account events; times
// spread over the day. Every key exists at the end (all were written in the
// last minutes of wall-clock time), so this is the upper bound of a busy
// account; the replay ZSETs are reported apart, since in steady state they
// only hold the last SP_STREAM_REPLAY_TTL of wall-clock time.
func TestMemoryPerAccount(t *testing.T) {
	if os.Getenv("SP_TEST_FEATURES_MEMORY") != "1" {
		t.Skip("set SP_TEST_FEATURES_MEMORY=1 to measure")
	}
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

	// MEMORY USAGE of every key, by entity and kind.
	sum := map[string]int64{}
	count := map[string]int64{}
	iter := c.(*redis.Client).Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		b, err := c.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		rest := strings.TrimPrefix(k, prefix+"{")
		kind := rest[:1] + ":" + rest[strings.LastIndex(rest, ":")+1:]
		sum[kind] += b
		count[kind]++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var total, replay int64
	for k := range sum {
		kinds = append(kinds, k)
		total += sum[k]
		if strings.HasSuffix(k, ":r") {
			replay += sum[k]
		}
	}
	sort.Strings(kinds)
	t.Logf("%d events (%d days x %d accounts x %d/day)", n, days, accounts, txPerDay+aePerDay)
	for _, k := range kinds {
		t.Logf("%-5s %6d keys  %9d bytes  %6d bytes/key  %6d bytes/account", k, count[k], sum[k], sum[k]/count[k], sum[k]/accounts)
	}
	t.Logf("total %d bytes = %d bytes per account; without the replay ZSETs %d bytes per account",
		total, total/accounts, (total-replay)/accounts)
}
