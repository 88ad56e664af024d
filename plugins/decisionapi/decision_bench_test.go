package decisionapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/rules"
)

// BenchmarkDecisionHandler: one decision through the handler, everything
// but Go's HTTP server: the body read and validated, the counterparty
// encrypted and fingerprinted, the running totals applied in Redis (real,
// batched with the concurrent decisions), 50 real-time rules, the answer
// remembered and written, the decided transaction encoded and queued.
// 5,000 accounts pay 13 payees. cpu_us/decision is the process's CPU
// (getrusage) per decision, which a machine shared with other work
// disturbs less than the time per decision; redis_cpu_us/decision is
// Redis' (INFO cpu), with its commands' share logged (INFO commandstats).
// SP_TEST_BENCH_INFLIGHT sets the decisions in flight per core (default
// 32: large batches; a few, as at 2,000/s, make small ones).
func BenchmarkDecisionHandler(b *testing.B) {
	a := batchAPIOn(b, fmt.Sprintf("t-bench-%d:", time.Now().UnixNano()))
	a.MaxBody, a.timeout, a.fallback = daMaxBodyDefault, 250*time.Millisecond, event.OutcomeReview
	enc, fp := identity.DevKeys()
	var err error
	if a.protector, err = identity.NewProtector(enc, fp); err != nil {
		b.Fatal(err)
	}
	ws := event.UUID{7}
	a.rules = newRealtimeRules(nil, time.Hour, service.MockResources().Logger())
	var rs []rules.Rule
	for i := range 50 {
		expr := []string{
			fmt.Sprintf(`event.amount >= %d && features.account.out_count_1h >= %d`, 1000+i*100, 2+i%4),
			fmt.Sprintf(`event.direction == "out" && event.amount >= %d && features.account.new_counterparty`, 3000+i*50),
			fmt.Sprintf(`features.account.out_count_1h >= %d`, 5+i),
			fmt.Sprintf(`event.amount >= %d && event.currency == "EUR"`, 8000+i*10),
			fmt.Sprintf(`event.direction == "in" && event.amount >= %d`, 5000+i*20),
		}[i%5]
		rs = append(rs, rules.Rule{ID: event.UUID{byte(i + 1)}, WorkspaceID: ws, Name: fmt.Sprintf("b_rule_%02d", i),
			AppliesTo: event.KindTransaction, Expression: expr, Severity: "high", Action: "review", Score: "10", Enabled: true, Version: 1})
	}
	prog, err := rules.Compile(rs)
	if err != nil {
		b.Fatal(err)
	}
	a.rules.loader.Publish(rules.NewSet(map[event.UUID]*rules.Program{ws: prog}))
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-a.out:
			case <-done:
				return
			}
		}
	}()
	run := time.Now().UnixNano()
	var seq, failed, degraded atomic.Int64
	decideOne := func() {
		n := seq.Add(1)
		body := fmt.Appendf(nil, `{"external_id":"%d-%d","occurred_at":%q,"account_external_id":"acc-%d","customer_external_id":"cust-%d",`+
			`"amount":"%d.%02d","currency":"EUR","direction":%q,"counterparty":{"name":"Payee %d","identifier":"4400532013%03d","identifier_kind":"account_number"}}`,
			run, n, time.Now().UTC().Format(time.RFC3339Nano), n%5000, n%5000, 10+n%500, n%100, []string{"out", "out", "in"}[n%3], n%13, n%13)
		r := httptest.NewRequest(http.MethodPost, "/v1/decisions", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r = r.WithContext(context.WithValue(r.Context(), apirequest.ArrivalKey{}, time.Now()))
		w := httptest.NewRecorder()
		switch code := a.handleDecision(w, r, ws); {
		case code != http.StatusOK:
			if failed.Add(1) == 1 {
				b.Logf("answer %d: %s", code, w.Body.Bytes())
			}
		case bytes.Contains(w.Body.Bytes(), []byte(`"degraded":true`)):
			degraded.Add(1) // out of time on a busy machine
		}
	}
	for range 2000 { // the accounts' keys made, the cache warm
		decideOne()
	}
	inflight := 32 // decisions in flight per core, batched together
	if v, err := strconv.Atoi(os.Getenv("SP_TEST_BENCH_INFLIGHT")); err == nil && v > 0 {
		inflight = v
	}
	var before, after syscall.Rusage
	ru0 := testenv.ReadRedisUsage(b, a.redis)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(inflight)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			decideOne()
		}
	})
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu_us/decision")
	// Redis' CPU (INFO cpu) and its commands' time (INFO commandstats):
	// precise on a Redis of the benchmark's own (SP_REDIS_URL).
	ru := testenv.ReadRedisUsage(b, a.redis).Since(ru0)
	b.ReportMetric(float64(ru.CPU.Microseconds())/float64(b.N), "redis_cpu_us/decision")
	b.Logf("per decision (%d): %s", b.N, ru.PerOp(b.N))
	b.ReportMetric(float64(degraded.Load()), "degraded")
	if f := failed.Load(); f > 0 {
		b.Errorf("%d decisions failed", f)
	}
}
