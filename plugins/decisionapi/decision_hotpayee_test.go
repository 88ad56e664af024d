package decisionapi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// A busy payee paid concurrently by many accounts through two decision
// processes (two APIs on one Redis prefix, each with its own batches,
// cache and CAS): every decision's features include every decision
// answered before it was sent, no two decisions see the same count, and
// the payee's final totals are the sum of all of them.
func TestDecisionHotPayeeFeaturesAreExact(t *testing.T) {
	prefix := fmt.Sprintf("t-hot-%d:", time.Now().UnixNano())
	apis := []*decisionAPI{batchAPIOn(t, prefix), batchAPIOn(t, prefix)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n, accounts = 400, 40
	var answered atomic.Int64
	seen := make([]int64, n)   // the payee's paid_count_24h in each answer
	before := make([]int64, n) // answers given before each was sent
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
			env := batchTxn(fmt.Sprintf("hot-%d", i), fmt.Sprintf("acc-%d", i%accounts))
			env.Counterparty = &event.Counterparty{Fingerprint: "busy-merchant"}
			a := apis[i%2]
			before[i] = answered.Load()
			res, err := a.applyBatched(ctx, env, a.rememberKey(env))
			if err == nil && res.features == nil {
				err = fmt.Errorf("no features")
			}
			if err != nil {
				errs[i] = err
				return
			}
			seen[i], errs[i] = strconv.ParseInt(fmt.Sprint(res.features.Feature("counterparty", "paid_count_24h")), 10, 64)
			answered.Add(1)
		}()
	}
	wg.Wait()
	// The two processes' batches wrote the payee over each other: what
	// the CAS lost was read again and redone.
	t.Logf("entity writes lost to the other process and redone: %d", apis[0].store.Conflicts()+apis[1].store.Conflicts())
	counts := map[int64]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("decision %d: %v", i, errs[i])
		}
		if seen[i] <= before[i] {
			t.Errorf("decision %d saw the payee paid %d times; %d decisions were answered before it was sent", i, seen[i], before[i])
		}
		counts[seen[i]] = true
	}
	if len(counts) != n {
		t.Errorf("%d distinct paid_count_24h among %d payments to one payee, want each its own (1..%d)", len(counts), n, n)
	}
	final, err := apis[0].store.ReadCounterparty(ctx, event.UUID{1}, "busy-merchant", "EUR")
	if err != nil {
		t.Fatal(err)
	}
	count, _ := strconv.ParseInt(fmt.Sprint(final["paid_count_24h"]), 10, 64)
	sum, _ := strconv.ParseFloat(fmt.Sprint(final["paid_sum_24h"]), 64)
	if count != n || sum != 10*n {
		t.Errorf("the payee's totals after %d payments of 10.00: count %d, sum %v; want %d and %d", n, count, sum, n, 10*n)
	}
}
