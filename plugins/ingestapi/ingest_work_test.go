package ingestapi

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/devtools/apisample"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// The work per item, without timing: a change that doubles it fails here.

// workBatch is n valid transactions, half with an IBAN counterparty.
func workBatch(n int, at time.Time) []byte {
	items := make([]string, n)
	for i := range items {
		cp := `"counterparty":{"name":"Shop ` + fmt.Sprint(i%50) + `"}`
		if i%2 == 0 {
			cp = `"counterparty":{"name":"Hausverwaltung Müller GmbH","identifier":"DE89 3704 0044 0532 0130 00","identifier_kind":"iban"}`
		}
		items[i] = fmt.Sprintf(`{"external_id":"w-%d","occurred_at":%q,"account_external_id":"acc-%d","customer_external_id":"cust-%d",`+
			`"amount":"%d.90","currency":"EUR","direction":"out","type":"card","channel":"pos","metadata":{"mcc":"5411"},%s}`,
			i, at.Format(time.RFC3339Nano), i%100, i%100, i, cp)
	}
	return apisample.Batch(items...)
}

// maxDecodeAllocsPerItem bounds what parsing, validating, protecting and
// encoding one item allocates: 5.6 measured. The bound leaves room for
// noise and catches the costlier allocations the code avoids coming back,
// such as a string copied out of the body for every field (some 12 more an
// item) or the body not split in place.
const maxDecodeAllocsPerItem = 8

func TestDecodeAllocationsPerItem(t *testing.T) {
	const n = 500
	body := workBatch(n, apisample.Now.Add(-time.Hour))
	allocs := testing.AllocsPerRun(5, func() {
		got, err := apirequest.DecodeBatch(body, event.KindTransaction, apisample.Workspace, apisample.Now, 1000, apisample.Protector)
		if err != nil || len(got) != n || len(got[0].Errors) != 0 {
			t.Fatalf("decodeBatch: %v %+v", err, got[0].Errors)
		}
	})
	per := allocs / n
	t.Logf("decodeBatch: %.1f allocations per item", per)
	if per > maxDecodeAllocsPerItem+raceAllocsPerItem {
		t.Errorf("apirequest.DecodeBatch allocates %.1f times per item, more than %d", per, maxDecodeAllocsPerItem+raceAllocsPerItem)
	}
}

// roundTrips counts the commands and pipelines a Redis client sends.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// The resend check costs a fixed number of Redis round trips per request,
// not one per item: the claim (SET NX GET, pipelined) and the request's
// accepted marker, or for a resend the markers of the requests it found.
func TestRedisRoundTripsPerRequest(t *testing.T) {
	f := newAPIFixture(t)
	var rt roundTrips
	f.a.idem.client.AddHook(&rt)
	// A first request opens the connections (their HELLO is not the
	// check's work).
	f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txnAt("rt-warm", f.txTime, "1.00"))))
	const n = 200
	items := make([]string, n)
	for i := range items {
		items[i] = f.txnAt(fmt.Sprintf("rt-%d", i), f.txTime, "1.00")
	}
	body := string(apisample.Batch(items...))
	for round, want := range []string{statusAccepted, statusDuplicate} {
		before := rt.n.Load()
		_, out := f.call(t, "POST", "/v1/transactions", f.keyA, body)
		st, _ := results(t, out)
		if len(st) != n || st[0] != want || st[n-1] != want {
			t.Fatalf("round %d: %v", round, strings.Join(st[:min(3, len(st))], ","))
		}
		got := rt.n.Load() - before
		t.Logf("round %d: %d Redis round trips for %d items", round, got, n)
		if got > 2 {
			t.Errorf("round %d: %d Redis round trips for %d items, want at most 2", round, got, n)
		}
	}
}

func BenchmarkDecodeBatchWork(b *testing.B) {
	body := workBatch(500, apisample.Now.Add(-time.Hour))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := apirequest.DecodeBatch(body, event.KindTransaction, apisample.Workspace, apisample.Now, 1000, apisample.Protector); err != nil {
			b.Fatal(err)
		}
	}
}

// maxAnswerAllocsPerItem bounds what answering one new item allocates
// past its decoding: its Redis claim (go-redis's command; the keys,
// values and arguments are cut from buffers of the request's, and the
// accepted mark is one command a request), its message to the pipeline
// (about 5, Benthos's message, metadata and context) and its result: 10.9
// measured and the fake pipeline's copy of the record (11.8 with a string
// allocated for each answer's ID, 17.8 with a slice of arguments, a value and two boxed strings
// per SET, 25.8 with a batch Indexer, 33 with a SET per item for the
// accepted mark, 37 with go-redis's SetArgs), the fake pipeline's and the
// clients' goroutines included.
const maxAnswerAllocsPerItem = 14

func TestAnswerAllocationsPerItem(t *testing.T) {
	f := newAPIFixture(t)
	const n = 200
	var parsed [][]apirequest.ParsedItem
	for run := range 7 {
		items := make([]string, n)
		for i := range items {
			items[i] = f.txnAt(fmt.Sprintf("alloc-%d-%d", run, i), f.txTime, "1.00")
		}
		p, err := apirequest.DecodeBatch(apisample.Batch(items...), event.KindTransaction, f.wsA, time.Now().UTC(), 1000, apisample.Protector)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, p)
	}
	ctx := context.Background()
	// The first request opens the connections.
	_, _ = f.a.answerBatch(ctx, f.wsA, event.KindTransaction, "txn.ingested", parsed[0])
	run := 1
	allocs := testing.AllocsPerRun(5, func() {
		res, _ := f.a.answerBatch(ctx, f.wsA, event.KindTransaction, "txn.ingested", parsed[run])
		run++
		if res[0].Status != statusAccepted || res[n-1].Status != statusAccepted {
			t.Fatalf("answers %s … %s", res[0].Status, res[n-1].Status)
		}
	})
	per := allocs / n
	t.Logf("answerBatch: %.1f allocations per item", per)
	if per > maxAnswerAllocsPerItem+raceAllocsPerItem {
		t.Errorf("answerBatch allocates %.1f times per item, more than %d", per, maxAnswerAllocsPerItem+raceAllocsPerItem)
	}
}
