package pgrulehits

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// cutDatabase makes the test's database unreachable for the output, as a
// restarting server is: it refuses new connections and the system role's
// open ones are ended. The superuser's connections stay, so the test can
// count rows and restore can undo it; it returns restore.
func (h *hitsHarness) cutDatabase() (restore func()) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A database's own sessions cannot disallow connections to it.
	admin := h.db.Connect(h.t, testenv.PostgresSuperuserURL(h.t))
	name := strconv.Quote(h.db.Name)
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS false"); err != nil {
		h.t.Fatalf("refusing connections: %v", err)
	}
	restored := false
	restore = func() {
		if restored {
			return
		}
		restored = true
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer rcancel()
		if _, err := admin.Exec(rctx, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true"); err != nil {
			h.t.Errorf("accepting connections again: %v", err)
		}
	}
	h.t.Cleanup(restore)
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = $1 AND usename = 'speculapro_system'`, h.db.Name); err != nil {
		h.t.Fatalf("ending the output's connections: %v", err)
	}
	return restore
}

// A lost connection is the engine's to handle: WriteBatch returns
// service.ErrNotConnected (counted as the batch's one fault, nothing
// stored) instead of retrying inside, Connect waits for PostgreSQL with the
// output's backoff (each wait a retry) and fails when its context ends, and a stream running the output writes the
// batch once PostgreSQL is back, each hit exactly once, including those of a
// batch whose write was cut off.
func TestLostConnectionIsHandedToTheEngine(t *testing.T) {
	h := newHitsHarness(t)
	rule := h.rules["large_amount"]
	if err := h.hits.Connect(context.Background()); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	h.writeHits(evaluated(t, h.ws, 0, 5, rule))

	restore := h.cutDatabase()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := h.hits.WriteBatch(ctx, evaluated(t, h.ws, 5, 10, rule))
	if !errors.Is(err, service.ErrNotConnected) {
		t.Fatalf("WriteBatch with PostgreSQL unreachable: %v, want service.ErrNotConnected", err)
	}
	if got := h.m.Get("retries{transaction}"); got != 0 {
		t.Errorf("retries = %d, want 0 (no wait has followed yet)", got)
	}
	if got := h.m.Get("faults{transaction}"); got != 1 {
		t.Errorf("faults = %d, want 1", got)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	if err := h.hits.Connect(cctx); err == nil {
		t.Error("Connect succeeded while PostgreSQL refuses connections")
	}
	if got := h.m.Get("retries{transaction}"); got < 1 {
		t.Errorf("retries = %d after Connect waited for PostgreSQL, want one per wait", got)
	}
	if got := h.m.Get("faults{transaction}"); got != 1 {
		t.Errorf("faults = %d after Connect's waits, want still 1", got)
	}

	// The engine: the same output in a stream, written to while PostgreSQL
	// is unreachable, then brought back.
	sb := service.NewStreamBuilder()
	sb.SetLogger(slog.New(slog.NewTextHandler(h.logs, nil)))
	if err := sb.AddOutputYAML(`
pg_rule_hits:
  url: "` + h.db.SystemURL + `"
  kind: transaction
  initial_backoff: 20ms
  max_backoff: 200ms
`); err != nil {
		t.Fatal(err)
	}
	produce, err := sb.AddBatchProducerFunc()
	if err != nil {
		t.Fatal(err)
	}
	stream, err := sb.Build()
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	runCtx, stop := context.WithCancel(context.Background())
	defer func() {
		stop()
		<-ran
	}()
	go func() { ran <- stream.Run(runCtx) }()
	produced := make(chan error, 1)
	go func() { produced <- produce(ctx, evaluated(t, h.ws, 5, 15, rule)) }()
	select {
	case err := <-produced:
		t.Fatalf("the batch was acked while PostgreSQL was unreachable: %v", err)
	case <-time.After(2 * time.Second):
	}
	if got := h.rowCounts()["rule_hits"]; got != 5 {
		t.Fatalf("rule_hits = %d while PostgreSQL was unreachable, want the 5 written before", got)
	}
	restore()
	awaitWrite(ctx, t, produced, "the batch after PostgreSQL came back (30 s at most)")
	if got := h.rowCounts(); got["rule_hits"] != 15 || got["alerts"] != 15 {
		t.Errorf("rows %v, want each of the 15 hits and alerts exactly once", got)
	}
}
