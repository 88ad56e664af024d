package tests

import (
	"context"
	"errors"
	"io"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// hangingListener accepts connections, reads what arrives and never
// answers: a webhook receiver that hangs. It counts the connections open
// at once.
type hangingListener struct {
	addr     string
	mu       sync.Mutex
	conns    map[net.Conn]bool
	accepted int
	most     int
}

func newHangingListener(t testing.TB) *hangingListener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hangingListener{addr: l.Addr().String(), conns: map[net.Conn]bool{}}
	// The accept loop ends when cleanup closes the listener; each
	// connection's reader ends when cleanup closes the connection.
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns[c] = true
			h.accepted++
			h.most = max(h.most, len(h.conns))
			h.mu.Unlock()
			go func() {
				_, _ = io.Copy(io.Discard, c)
				h.mu.Lock()
				delete(h.conns, c)
				h.mu.Unlock()
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		h.mu.Lock()
		for c := range h.conns {
			c.Close()
		}
		h.mu.Unlock()
	})
	return h
}

// open, accepted and most: connections open now, accepted in all, and
// open at once at most.
func (h *hangingListener) counts() (open, accepted, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns), h.accepted, h.most
}

// workspace adds a workspace and returns its id.
func (s *workerStack) workspace(t testing.TB, name string) event.UUID {
	t.Helper()
	var id event.UUID
	if err := s.conn.QueryRow(context.Background(),
		"INSERT INTO speculapro.workspaces (name) VALUES ($1) RETURNING id", name).Scan(&id); err != nil {
		t.Fatalf("creating workspace %s: %v", name, err)
	}
	return id
}

// addEndpointIn registers url in workspace ws through the CLI.
func (s *workerStack) addEndpointIn(t testing.TB, ws event.UUID, url string) event.UUID {
	t.Helper()
	out := s.cli(t, s.env, "add", "--workspace", ws.String(), "--url", url, "--events", "alert.created")
	id, err := event.ParseUUID(out["endpoint_id"])
	if err != nil {
		t.Fatalf("webhook add printed %v", out)
	}
	return id
}

// queueIn queues n deliveries to endpoint in workspace ws.
func (s *workerStack) queueIn(t testing.TB, ws, endpoint event.UUID, n int) {
	t.Helper()
	if _, err := s.conn.Exec(context.Background(), `
INSERT INTO speculapro.webhook_deliveries (workspace_id, endpoint_id, event_type, event_id, payload)
SELECT $1, $2, 'alert.created', a.id, jsonb_build_object('type', 'alert.created', 'id', a.id, 'workspace_id', $1::uuid, 'created_at', now())
  FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, $3)) a`, ws, endpoint, n); err != nil {
		t.Fatalf("queueing %d deliveries: %v", n, err)
	}
}

// healthyDelays queues a steady trickle of healthy deliveries and then a
// burst, waits (at most bound) until all are delivered, and returns each
// one's delay from queued to delivered, burst and trickle apart. done says
// whether all were delivered within bound.
func (s *workerStack) healthyDelays(t *testing.T, ws, endpoint event.UUID, burst, trickle, ticks int, tick, bound time.Duration) (burstDelays, trickleDelays []float64, done bool) {
	t.Helper()
	var since time.Time
	if err := s.conn.QueryRow(context.Background(), "SELECT now()").Scan(&since); err != nil {
		t.Fatal(err)
	}
	before := s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE endpoint_id = $1", endpoint)
	for range ticks {
		s.queueIn(t, ws, endpoint, trickle)
		time.Sleep(tick)
	}
	s.queueIn(t, ws, endpoint, burst)
	want := before + burst + ticks*trickle
	deadline := time.Now().Add(bound)
	for s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE endpoint_id = $1 AND status = 'delivered'", endpoint) < want {
		if time.Now().After(deadline) {
			return nil, nil, false
		}
		time.Sleep(100 * time.Millisecond)
	}
	rows, err := s.conn.Query(context.Background(), `
SELECT extract(epoch FROM delivered_at - created_at)::float8, count(*) OVER (PARTITION BY created_at) = $3
  FROM speculapro.webhook_deliveries WHERE endpoint_id = $1 AND created_at > $2`, endpoint, since, burst)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var d float64
		var inBurst bool
		if err := rows.Scan(&d, &inBurst); err != nil {
			t.Fatal(err)
		}
		if inBurst {
			burstDelays = append(burstDelays, d)
		} else {
			trickleDelays = append(trickleDelays, d)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Float64s(burstDelays)
	sort.Float64s(trickleDelays)
	return burstDelays, trickleDelays, true
}

// quantile of sorted delays.
func quantile(ds []float64, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// The noisy neighbour: one workspace's endpoints hang (accept the
// connection and never answer), another's answers 500 to everything, a
// third's is healthy. The healthy endpoint's load (a steady trickle, then a
// burst) runs first alone, then again beside the other two's backlogs:
// each hanging endpoint holds at most its few slots, and their workspace at
// most its own, for the whole (long) timeout, and meanwhile every healthy delivery is delivered and recorded,
// each as it ends, as are the failing endpoint's attempts. The healthy
// deliveries' delay (queued to delivered) in both runs is logged: the
// figure to quote.
func TestWorkerHangingEndpointDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	const (
		timeout = 60 * time.Second // the hanging endpoint's deliveries hold their slots this long
		bound   = 30 * time.Second // the healthy deliveries must be done well before that
		limit   = 4                // SP_WEBHOOK_ENDPOINT_CONCURRENCY's default
		tenant  = 16               // SP_WEBHOOK_WORKSPACE_CONCURRENCY's default
		hanging = 6                // endpoints of the hanging tenant: more than its slots allow
		backlog = 200              // per hanging endpoint: twelve batches in all
		failing = 300
		burst   = 200
		trickle = 10 // healthy deliveries every tick
		ticks   = 20
		tick    = 200 * time.Millisecond
	)
	s := newWorkerStack(t)
	rcv := newReceiver(t)
	hang := newHangingListener(t)
	wsHang, wsFail, wsOK := s.ws, s.workspace(t, "failing tenant"), s.workspace(t, "healthy tenant")
	var epHang []event.UUID
	for i := range hanging {
		epHang = append(epHang, s.addEndpointIn(t, wsHang, "http://"+hang.addr+"/hang/"+strconv.Itoa(i)))
	}
	epFail := s.addEndpointIn(t, wsFail, rcv.url("/error/fail"))
	epOK := s.addEndpointIn(t, wsOK, rcv.url("/ok/healthy"))

	startWorker(t, "worker", s.with(map[string]string{
		"SP_WEBHOOK_TIMEOUT": timeout.String(),
		"SP_WORKER_LEASE":    (2 * timeout).String(),
		// The defaults, which the stack's environment raises for the other tests.
		"SP_WEBHOOK_ENDPOINT_CONCURRENCY":  strconv.Itoa(limit),
		"SP_WEBHOOK_WORKSPACE_CONCURRENCY": strconv.Itoa(tenant),
	}))
	// Once one delivery is through, the worker is up and claiming.
	s.queueIn(t, wsOK, epOK, 1)
	waitUntil(t, time.Minute, "the worker's first delivery", func() error {
		if s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE status = 'delivered'") == 0 {
			return errors.New("nothing delivered yet")
		}
		return nil
	})

	aloneBurst, aloneTrickle, ok := s.healthyDelays(t, wsOK, epOK, burst, trickle, ticks, tick, bound)
	if !ok {
		t.Fatalf("the healthy endpoint's deliveries alone were not all delivered within %s", bound)
	}

	// The neighbours' backlogs, older than anything the healthy endpoint
	// gets from now on.
	for _, ep := range epHang {
		s.queueIn(t, wsHang, ep, backlog)
	}
	s.queueIn(t, wsFail, epFail, failing)
	nextBurst, nextTrickle, ok := s.healthyDelays(t, wsOK, epOK, burst, trickle, ticks, tick, bound)
	open, accepted, most := hang.counts()
	if !ok {
		t.Fatalf("%d of the healthy deliveries are still pending %s after they were queued, while the hanging endpoints hold %d connections (%d accepted): the hanging neighbour holds the others up",
			s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE endpoint_id = $1 AND status = 'pending'", epOK), bound, open, accepted)
	}

	// The hanging endpoints still hold their slots, and no more: each its
	// own, together their workspace's.
	inFlight, mostPerEndpoint := 0, 0
	for _, ep := range epHang {
		n := s.count(t, `SELECT count(*) FROM speculapro.webhook_deliveries
 WHERE endpoint_id = $1 AND status = 'pending' AND claimed_by IS NOT NULL AND next_attempt_at > now()`, ep)
		inFlight += n
		mostPerEndpoint = max(mostPerEndpoint, n)
	}
	if open == 0 || inFlight == 0 {
		t.Errorf("the hanging endpoints hold %d connections and %d deliveries in flight: the test wants them stuck while the others go out", open, inFlight)
	}
	if mostPerEndpoint > limit {
		t.Errorf("a hanging endpoint has %d deliveries in flight, want at most %d", mostPerEndpoint, limit)
	}
	if most > tenant || inFlight > tenant {
		t.Errorf("the hanging workspace had up to %d connections open and has %d deliveries in flight, want at most %d", most, inFlight, tenant)
	}
	if n := s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE workspace_id = $1 AND status <> 'pending'", wsHang); n != 0 {
		t.Errorf("%d of the hanging endpoints' deliveries settled before their timeout", n)
	}
	// Each failing attempt was recorded as it ended, not held back with the
	// hanging ones.
	failed := s.count(t, "SELECT coalesce(sum(attempts), 0)::int FROM speculapro.webhook_deliveries WHERE endpoint_id = $1 AND response_status = 500 AND claimed_by IS NULL", epFail)
	if failed == 0 {
		t.Errorf("none of the failing endpoint's attempts is recorded while the hanging endpoint's are in flight")
	}
	if got, want := len(rcv.requests("/ok/")), 1+2*(burst+ticks*trickle); got != want {
		t.Errorf("the healthy endpoint got %d requests, want %d (once each)", got, want)
	}

	t.Logf("healthy delivery delay, queued to delivered (%d every %s for %s, then %d queued at once):", trickle, tick, time.Duration(ticks)*tick, burst)
	t.Logf("  alone: trickle median %.3fs p99 %.3fs worst %.3fs; burst median %.3fs worst %.3fs",
		quantile(aloneTrickle, 0.5), quantile(aloneTrickle, 0.99), quantile(aloneTrickle, 1), quantile(aloneBurst, 0.5), quantile(aloneBurst, 1))
	t.Logf("  beside hanging and failing (%s timeout): trickle median %.3fs p99 %.3fs worst %.3fs; burst median %.3fs worst %.3fs",
		timeout, quantile(nextTrickle, 0.5), quantile(nextTrickle, 0.99), quantile(nextTrickle, 1), quantile(nextBurst, 0.5), quantile(nextBurst, 1))
	t.Logf("  %d hanging endpoints: %d connections open, %d at most, %d deliveries in flight (%d at most per endpoint); failing endpoint: %d attempts recorded",
		hanging, open, most, inFlight, mostPerEndpoint, failed)
}
