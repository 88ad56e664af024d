package tests

import (
	"regexp"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

// PostgreSQL stopped for 10 s under a sending worker (a private instance:
// the shared one must never be stopped): the worker keeps running, backs off
// and logs the failure a few times rather than once per poll, and once the
// database is back every delivery arrives, the ones cut off mid-send again.
func TestWorkerRidesOutDatabaseOutage(t *testing.T) {
	t.Parallel()
	n := 1000
	if fullScale() {
		n = 10000
	}
	pg := testenv.PrivatePostgres(t)
	s := workerStackOn(t, dbtest.NewOn(t, pg.SuperuserURL, "speculapro"))
	s.env = s.with(map[string]string{
		"SP_WEBHOOK_BACKOFF_MAX": "2s",
		"SP_WEBHOOK_TIMEOUT":     "2s",
		"SP_WORKER_LEASE":        "6s",
		"SP_WORKER_SENDERS":      "1",
	})
	rcv := newReceiver(t)
	rcv.delay = 200 * time.Millisecond
	ep, _ := s.addEndpoint(t, rcv.url("/delay/outage"))
	keys := s.queueDeliveries(t, ep, n)

	w := startWorker(t, "worker", s.env)
	waitUntil(t, waitBound, "the first deliveries", func() error {
		if len(rcv.requests("/delay/outage")) < 100 {
			return errString("fewer than 100 arrived")
		}
		return nil
	})
	pg.Stop()
	stopped := time.Now()
	time.Sleep(10 * time.Second)
	if !w.running() {
		t.Fatalf("the worker exited during the outage:\n%s", w.tail(3000))
	}
	out := w.stdout.String() + w.stderr.String()
	retries := len(regexp.MustCompile(`level=WARN msg="worker: recording outcomes failed, retrying"`).FindAllString(out, -1))
	claims := len(regexp.MustCompile(`level=ERROR msg="worker: claiming due rows failed, retrying"`).FindAllString(out, -1))
	if retries == 0 || retries > 15 || claims > 3 {
		t.Errorf("in 10 s of outage: %d recording retries (want 1 to 15: backing off) and %d claim-failure lines (want at most 3)", retries, claims)
	}
	pg.Start()
	t.Logf("PostgreSQL down for %s; %d recording retries and %d claim-failure lines logged", time.Since(stopped).Round(100*time.Millisecond), retries, claims)
	s.conn = s.db.Connect(t, s.db.SuperuserURL)
	s.waitDone(t, 2*time.Minute)
	if got := s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE status = 'delivered'"); got != n {
		t.Errorf("%d of %d delivered", got, n)
	}
	seen := map[string]int{}
	for _, r := range rcv.requests("/delay/outage") {
		seen[r.key]++
	}
	dups := 0
	for _, k := range keys {
		if seen[k] == 0 {
			t.Fatalf("event %s never arrived", k)
		}
		dups += seen[k] - 1
	}
	t.Logf("%d deliveries, %d sent twice (cut off by the outage before their outcome was stored)", n, dups)
	w.stop(t)
}
