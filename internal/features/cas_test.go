package features

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/redisconn"
)

// second opens another client on tg, as a second stream process would.
func second(t *testing.T, tg target) redis.UniversalClient {
	t.Helper()
	c, err := redisconn.Open(tg.url(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Two writers hammering the same customer and counterparty: the CAS loses
// no update, and every event's features are those of one serial order (the
// customer's count right after each event is 1..n, each exactly once).
//
// The same with one Store and two goroutines (two pipeline threads of one
// process): its batches hold their entities and write in turn (cache.go).
// And with one Store whose cache of 4 KiB evicts the busy customer's and
// counterparty's states as soon as they are published, so every batch
// decodes them again into an arena an evicted state left (arena.go) while
// the other goroutine's batch computes and writes.
func TestConcurrentWritersKeepExactTotals(t *testing.T) {
	for _, tg := range targets {
		for _, mode := range []string{"", "/one_store", "/one_store_tiny_cache"} {
			t.Run(tg.name+mode, func(t *testing.T) {
				c, prefix, _ := open(t, tg)
				stores := []*Store{New(c, Options{KeyPrefix: prefix}), New(second(t, tg), Options{KeyPrefix: prefix})}
				switch mode {
				case "/one_store":
					stores[1] = stores[0]
				case "/one_store_tiny_cache":
					stores[0] = New(c, Options{KeyPrefix: prefix, CacheBytes: 4 << 10})
					stores[1] = stores[0]
				}
				const perWriter, batch = 300, 10
				at := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
				counts := make([][]int64, len(stores))
				errs := make([]error, len(stores))
				var wg sync.WaitGroup
				for w, s := range stores {
					wg.Go(func() {
						ctx := context.Background()
						for i := 0; i < perWriter; i += batch {
							var evs []*event.Envelope
							for j := i; j < i+batch; j++ {
								evs = append(evs, txn(fmt.Sprintf("w%d-%d", w, j), fmt.Sprintf("acc-%d", w), "cust", "fp",
									"1.0001", "EUR", event.DirectionOut, at.Add(time.Duration(j)*time.Second)))
							}
							got, err := s.Apply(ctx, evs)
							if err != nil {
								errs[w] = err
								return
							}
							for _, f := range got {
								counts[w] = append(counts[w], f["customer"].(map[string]any)["out_count_30d"].(int64))
							}
						}
					})
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				seen := map[int64]bool{}
				for _, cs := range counts {
					for _, n := range cs {
						if seen[n] || n < 1 || n > 2*perWriter {
							t.Fatalf("customer out_count_30d %d returned twice or out of range", n)
						}
						seen[n] = true
					}
				}
				ctx := context.Background()
				cust, err := stores[0].ReadCustomer(ctx, testWorkspace, "cust", "EUR")
				if err != nil {
					t.Fatal(err)
				}
				cp, err := stores[0].ReadCounterparty(ctx, testWorkspace, "fp", "EUR")
				if err != nil {
					t.Fatal(err)
				}
				n := int64(2 * perWriter)
				sum := json.Number(fmt.Sprintf("%d.%04d", n, n)) // n × 1.0001
				if cust["out_count_30d"] != n || cust["out_sum_30d"] != sum || cust["distinct_payees_30d"] != int64(1) {
					t.Errorf("customer: %v", cust)
				}
				if cp["paid_count_30d"] != n || cp["paid_sum_30d"] != sum || cp["distinct_payers_30d"] != int64(2) {
					t.Errorf("counterparty: %v", cp)
				}
				t.Logf("%d entity writes lost to the other writer and redone", stores[0].conflicts.Load()+stores[1].conflicts.Load())
			})
		}
	}
}

// A write lost to another writer between the read and the CAS: only the
// entities that writer changed are read again and recomputed, and the
// features returned are the recomputed ones.
func TestConflictRecomputesOnlyTheLosers(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, cnt := open(t, tg)
			a := New(c, Options{KeyPrefix: prefix})
			b := New(second(t, tg), Options{KeyPrefix: prefix})
			ctx := context.Background()
			at := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
			// Every entity exists already (so all three writes are CAS).
			for _, s := range []*Store{a, b} {
				if _, err := s.Apply(ctx, []*event.Envelope{
					txn(fmt.Sprint("warm", s == a), "acc-"+fmt.Sprint(s == a), "cust", "fp", "1", "EUR", event.DirectionOut, at),
				}); err != nil {
					t.Fatal(err)
				}
			}
			a.beforeWrite = func(attempt int) {
				if attempt != 1 {
					return
				}
				// The other writer counts a payment of the same customer to
				// the same counterparty from another account.
				if _, err := b.Apply(ctx, []*event.Envelope{
					txn("other", "acc-false", "cust", "fp", "20", "EUR", event.DirectionOut, at.Add(time.Second)),
				}); err != nil {
					t.Error(err)
				}
				cnt.reset()
			}
			got, err := a.Apply(ctx, []*event.Envelope{txn("mine", "acc-true", "cust", "fp", "300", "EUR", event.DirectionOut, at.Add(2*time.Second))})
			if err != nil {
				t.Fatal(err)
			}
			acct := got[0]["account"].(map[string]any)
			cust := got[0]["customer"].(map[string]any)
			cp := got[0]["counterparty"].(map[string]any)
			if acct["out_count_1h"] != int64(2) || acct["out_sum_1h"] != json.Number("301.0000") {
				t.Errorf("account: %v", acct)
			}
			if cust["out_count_1h"] != int64(4) || cust["out_sum_1h"] != json.Number("322.0000") {
				t.Errorf("customer (recomputed after the conflict): %v", cust)
			}
			if cp["paid_count_24h"] != int64(4) || cp["paid_sum_24h"] != json.Number("322.0000") || cp["distinct_payers_24h"] != int64(2) {
				t.Errorf("counterparty (recomputed after the conflict): %v", cp)
			}
			if n := a.conflicts.Load(); n != 2 {
				t.Errorf("%d entities conflicted, want 2 (customer and counterparty)", n)
			}
			// After the other writer: the CAS round trip, then one more
			// read and write of the two losers (a single Redis writes them
			// in one script call, a Cluster in one each).
			want := int64(3 + 2 + 2)
			if _, ok := c.(*redis.ClusterClient); !ok {
				want = 1 + 2 + 1
			}
			if n := cnt.piped.Load(); n != want {
				t.Errorf("%d commands piped after the conflict, want %d", n, want)
			}
		})
	}
}

// A value that does not decode (another format version, damaged) is
// reported naming the entity's kind, counted from empty with the batch, and
// overwritten; the other entities of the batch are applied as usual.
func TestUnreadableValueIsResetAndReported(t *testing.T) {
	cases := []struct{ name, value string }{
		{"unknown version", "\x00\x00\x00\x00\x00\x00\x00\x07\x63rest of a future format"},
		{"damaged", "\x00\x00\x00\x00\x00\x00\x00\x07\x01\xff\xff\xff"},
		{"too short", "abc"},
		{"empty", ""},
	}
	for _, tg := range targets {
		for _, tc := range cases {
			t.Run(tg.name+"/"+tc.name, func(t *testing.T) {
				c, prefix, _ := open(t, tg)
				s := New(c, Options{KeyPrefix: prefix})
				ctx := context.Background()
				at := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
				if _, err := s.Apply(ctx, []*event.Envelope{txn("t0", "acc", "cust", "fp", "5", "EUR", event.DirectionOut, at)}); err != nil {
					t.Fatal(err)
				}
				custID := event.CustomerID(testWorkspace, "cust")
				if err := c.Set(ctx, s.key(entityCustomer, custID), tc.value, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				if _, err := s.ReadCustomer(ctx, testWorkspace, "cust", "EUR"); err == nil || !strings.Contains(err.Error(), "customer") {
					t.Errorf("reading the damaged customer: %v", err)
				}
				got, err := s.Apply(ctx, []*event.Envelope{txn("t1", "acc", "cust", "fp", "7", "EUR", event.DirectionOut, at.Add(time.Second))})
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("want a *CorruptError, got %v", err)
				}
				msg := err.Error()
				if ce.Entities["customer"] != 1 || len(ce.Entities) != 1 || !strings.Contains(msg, "1 customer") {
					t.Errorf("error %q (%v) should name one customer", msg, ce.Entities)
				}
				if strings.Contains(msg, custID.String()) || strings.Contains(msg, "cust\"") {
					t.Errorf("error %q names the entity", msg)
				}
				if a := got[0]["account"].(map[string]any); a["out_count_1h"] != int64(2) || a["out_sum_1h"] != json.Number("12.0000") {
					t.Errorf("account beside the damaged customer: %v", a)
				}
				if p := got[0]["counterparty"].(map[string]any); p["paid_count_24h"] != int64(2) {
					t.Errorf("counterparty beside the damaged customer: %v", p)
				}
				if cu := got[0]["customer"].(map[string]any); cu["out_count_1h"] != int64(1) || cu["out_sum_1h"] != json.Number("7.0000") {
					t.Errorf("customer counted from empty: %v", cu)
				}
				// Overwritten: the next batch reads it again.
				got, err = s.Apply(ctx, []*event.Envelope{txn("t2", "acc", "cust", "", "1", "EUR", event.DirectionOut, at.Add(2*time.Second))})
				if err != nil {
					t.Fatal(err)
				}
				if cu := got[0]["customer"].(map[string]any); cu["out_count_1h"] != int64(2) {
					t.Errorf("customer after the reset: %v", cu)
				}
			})
		}
	}
}
