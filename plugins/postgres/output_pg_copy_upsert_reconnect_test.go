package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/testenv"
)

// refuseConnections makes the test database refuse new connections and
// cuts the output's own, so the next statement finds its connection gone
// and every ping fails until allowConnections.
func (h *harness) refuseConnections(t *testing.T) {
	t.Helper()
	h.allowConnections(t, false)
	t.Cleanup(func() { h.allowConnections(t, true) })
	h.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", h.db.Name)
}

// allowConnections switches the test database's ALLOW_CONNECTIONS, from a
// connection to another database (the setting cannot be changed from the
// database itself).
func (h *harness) allowConnections(t *testing.T, allow bool) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresSuperuserURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t", pgx.Identifier{h.db.Name}.Sanitize(), allow)); err != nil {
		t.Fatal(err)
	}
}

// A lost connection hands the batch back as not connected, with its fault
// counted; Connect then waits for PostgreSQL by the output's own backoff,
// logging each wait before it makes it, and returns once PostgreSQL takes
// connections again, after which the batch stores.
func TestLostConnectionConnectWaitsByItsOwnBackoff(t *testing.T) {
	h := newHarness(t, tableTransactions)
	ctx := context.Background()
	h.refuseConnections(t)

	batch := txnBatch(t, h.ws, 0, 10, nil)
	if err := h.out.WriteBatch(ctx, batch); !errors.Is(err, service.ErrNotConnected) {
		t.Fatalf("WriteBatch with the connection lost: %v, want service.ErrNotConnected", err)
	}
	if got := h.m.Get("faults{transactions}"); got != 1 {
		t.Errorf("faults counted %d, want 1", got)
	}

	connected := make(chan error, 1)
	go func() { connected <- h.out.Connect(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(h.logs.String(), logBatchRetry) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no waits logged while PostgreSQL refuses connections:\n%s", h.logs.String())
		}
		select {
		case err := <-connected:
			t.Fatalf("Connect returned %v while PostgreSQL refuses connections", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	h.allowConnections(t, true)
	select {
	case err := <-connected:
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Connect did not return once PostgreSQL took connections again")
	}

	logs := h.logs.String()
	line := logs[strings.Index(logs, logBatchRetry)-30:]
	line = line[:strings.IndexByte(line, '\n')]
	for _, want := range []string{"level=ERROR", "rows=10", "backoff="} {
		if !strings.Contains(line, want) {
			t.Errorf("retry line %q lacks %q", line, want)
		}
	}
	if got, logged := h.m.Get("retries{transactions}"), int64(strings.Count(logs, logBatchRetry)); got != logged {
		t.Errorf("retries counted %d, %d logged", got, logged)
	}
	if got := h.m.Get("faults{transactions}"); got != 1 {
		t.Errorf("faults counted %d after reconnecting, want still 1", got)
	}
	if err := h.out.WriteBatch(ctx, batch); err != nil {
		t.Fatalf("WriteBatch after reconnecting: %v", err)
	}
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 10 {
		t.Errorf("stored %d, want 10", n)
	}
}

// Shutdown ends Connect's wait at once, with the context's error.
func TestShutdownEndsTheWaitForPostgreSQL(t *testing.T) {
	h := newHarness(t, tableTransactions)
	h.refuseConnections(t)
	if err := h.out.WriteBatch(context.Background(), txnBatch(t, h.ws, 0, 10, nil)); !errors.Is(err, service.ErrNotConnected) {
		t.Fatalf("WriteBatch with the connection lost: %v, want service.ErrNotConnected", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	connected := make(chan error, 1)
	go func() { connected <- h.out.Connect(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-connected:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Connect at shutdown: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Connect kept waiting after shutdown")
	}
}
