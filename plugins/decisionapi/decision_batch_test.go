package decisionapi

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/features"
	"github.com/speculapro/speculapro/internal/redisconn"
)

// batchAPI is a decision API with only what decision_batch.go needs: real
// Redis, its own key prefix, both loops running.
func batchAPI(t *testing.T) *decisionAPI {
	t.Helper()
	return batchAPIOn(t, fmt.Sprintf("t-batch-%d:", time.Now().UnixNano()))
}

// batchAPIOn is batchAPI on the running totals under prefix: two of them
// on one prefix are two decision processes.
func batchAPIOn(t testing.TB, prefix string) *decisionAPI {
	t.Helper()
	rc, err := redisconn.Open(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	a := newDecisionAPIMetered(service.MockResources())
	a.timeout, a.remember = 2*time.Second, time.Minute
	a.rememberCh = make(chan rememberReq, daQueue)
	a.redis, a.store = rc, features.New(rc, features.Options{KeyPrefix: prefix, CacheBytes: decisionCacheBytes})
	a.breaker = newRedisBreaker(time.Second, time.Second)
	a.fopts.KeyPrefix = prefix
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.applyLoop(ctx) }()
	go func() { defer wg.Done(); a.rememberLoop(ctx) }()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		keys, _ := rc.Keys(context.Background(), prefix+"*").Result()
		for _, k := range keys {
			rc.Del(context.Background(), k)
		}
		_ = rc.Close()
	})
	return a
}

func batchTxn(ext, account string) *event.Envelope {
	ws, at := event.UUID{1}, time.Now().UTC()
	return &event.Envelope{
		Kind: event.KindTransaction, ID: event.TransactionID(ws, ext, at), WorkspaceID: ws, ExternalID: ext,
		AccountExternalID: account, Amount: "10.00", Currency: "EUR", Direction: event.DirectionOut,
		OccurredAt: at,
	}
}

// Concurrent decisions share batches and each gets its own features,
// including the payments of its account batched with it; a remembered
// external_id is answered from Redis and not applied again.
func TestDecisionBatchesApplyAndRemember(t *testing.T) {
	a := batchAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 60
	var wg sync.WaitGroup
	errs := make([]error, n)
	res := make([]applyRes, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := batchTxn(fmt.Sprintf("b-%d", i), "acc-1")
			res[i], errs[i] = a.applyBatched(ctx, env, a.rememberKey(env))
		}()
	}
	wg.Wait()
	counts := map[string]bool{}
	for i := range n {
		if errs[i] != nil || res[i].prev != nil || res[i].features == nil {
			t.Fatalf("decision %d: %+v, %v", i, res[i], errs[i])
		}
		acct, _ := res[i].features.Map()["account"].(map[string]any)
		counts[fmt.Sprint(acct["out_count_1h"])] = true
	}
	if len(counts) != n {
		t.Errorf("%d distinct out_count_1h among %d payments of one account, want each its own (1..%d)", len(counts), n, n)
	}

	env := batchTxn("b-0", "acc-1")
	b, _ := json.Marshal(decisionResponse{ExternalID: "b-0", Decision: event.OutcomeDecline})
	if prev := a.rememberBatched(ctx, a.rememberKey(env), b); prev != nil {
		t.Fatalf("the first answer lost to %+v", prev)
	}
	r, err := a.applyBatched(ctx, env, a.rememberKey(env))
	if err != nil || r.prev == nil || r.prev.Decision != event.OutcomeDecline || r.features != nil {
		t.Fatalf("a remembered external_id: %+v, %v; want its remembered decline, nothing applied", r, err)
	}
}

// Two concurrent answers for one external_id: the first remembered stands,
// the other is answered with it.
func TestDecisionBatchTwinsAnswerTheWinner(t *testing.T) {
	a := batchAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := a.rememberKey(batchTxn("twin", "acc-2"))
	var wg sync.WaitGroup
	got := make([]*decisionResponse, 2)
	for i, outcome := range []event.Outcome{event.OutcomeApprove, event.OutcomeReview} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(decisionResponse{ExternalID: "twin", Decision: outcome})
			got[i] = a.rememberBatched(ctx, key, b)
		}()
	}
	wg.Wait()
	switch {
	case got[0] == nil && got[1] != nil && got[1].Decision == event.OutcomeApprove:
	case got[1] == nil && got[0] != nil && got[0].Decision == event.OutcomeReview:
	default:
		t.Fatalf("twins answered %+v and %+v; want one to stand and the other to get its decision", got[0], got[1])
	}
}
