package pgwritetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/pgrole"
	"github.com/speculapro/speculapro/internal/pgsystem"
)

// BaseTime is the hour before the tests started, the first record's time.
var BaseTime = time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)

// Txn is a transaction envelope; tweak adjusts it before encoding.
func Txn(ws event.UUID, n int, tweak func(*event.Envelope)) event.Envelope {
	e := event.Envelope{
		V: event.Version, Kind: event.KindTransaction, WorkspaceID: ws,
		ExternalID:         fmt.Sprintf("txn-%06d", n),
		OccurredAt:         BaseTime.Add(time.Duration(n) * time.Millisecond),
		ReceivedAt:         BaseTime.Add(time.Duration(n)*time.Millisecond + time.Second),
		CustomerExternalID: fmt.Sprintf("cust-%d", n%7),
		AccountExternalID:  fmt.Sprintf("acc-%d", n%11),
		Type:               "transfer", Status: "completed", Channel: "mobile",
		Amount: fmt.Sprintf("%d.%02d", n, n%100), Currency: "EUR", Direction: event.DirectionOut,
		Metadata: []byte(`{"n":` + strconv.Itoa(n) + `}`),
	}
	if tweak != nil {
		tweak(&e)
	}
	e.ID = event.TransactionID(e.WorkspaceID, e.ExternalID, e.OccurredAt)
	return e
}

// Encode is e in its wire format.
func Encode(t testing.TB, e event.Envelope) []byte {
	t.Helper()
	b, err := event.Encode(e)
	if err != nil {
		t.Fatalf("encoding %s: %v", e.ExternalID, err)
	}
	return b
}

// BatchOf makes messages as the kafka_franz input does, offsets from first.
func BatchOf(t testing.TB, first int, values ...[]byte) service.MessageBatch {
	b := make(service.MessageBatch, len(values))
	for i, v := range values {
		m := service.NewMessage(v)
		m.MetaSetMut("kafka_topic", "sp.txn.ingested")
		m.MetaSetMut("kafka_partition", "2")
		m.MetaSetMut("kafka_offset", strconv.Itoa(first+i))
		m.MetaSetMut("kafka_key", "key-"+strconv.Itoa(first+i))
		m.MetaSetMut("trace", "t-"+strconv.Itoa(first+i))
		b[i] = m
	}
	return b
}

// TxnBatch is transactions from to to (not included) as one batch.
func TxnBatch(t testing.TB, ws event.UUID, from, to int, tweak func(*event.Envelope)) service.MessageBatch {
	var vals [][]byte
	for n := from; n < to; n++ {
		vals = append(vals, Encode(t, Txn(ws, n, tweak)))
	}
	return BatchOf(t, from, vals...)
}

// Workspace makes a workspace named name.
func Workspace(t testing.TB, conn *pgx.Conn, name string) event.UUID {
	t.Helper()
	var id event.UUID
	if err := conn.QueryRow(context.Background(),
		"INSERT INTO speculapro.workspaces (name) VALUES ($1) RETURNING id", name).Scan(&id); err != nil {
		t.Fatalf("creating workspace: %v", err)
	}
	return id
}

// Count is the number query answers.
func Count(t testing.TB, conn *pgx.Conn, query string, args ...any) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Exec runs query, failing t on an error.
func Exec(t testing.TB, conn *pgx.Conn, query string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// RetriesUntilFixed runs write while the database refuses its batch: write
// must keep retrying (retryLine logged three times, write not returned) until
// fix runs as the owner, and then succeed within 30 s.
func RetriesUntilFixed(t testing.TB, logs fmt.Stringer, retryLine string, owner *pgx.Conn, fix string, write func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- write() }()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(logs.String(), retryLine) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no retries logged:\n%s", logs.String())
		}
		select {
		case err := <-done:
			t.Fatalf("WriteBatch returned %v while the database refuses the batch", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := owner.Exec(context.Background(), fix); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WriteBatch: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WriteBatch did not finish after the fix")
	}
}

// RequireConnectRefuses checks that connect, as speculapro_app, fails with
// pgrole.ErrCannotBypassRLS unwrapped and stops the process with it.
func RequireConnectRefuses(t testing.TB, connect func(context.Context) error) {
	t.Helper()
	var refused error
	saved := pgsystem.RefuseToStart
	pgsystem.RefuseToStart = func(err error) { refused = err }
	defer func() { pgsystem.RefuseToStart = saved }()
	if err := connect(context.Background()); !errors.Is(err, pgrole.ErrCannotBypassRLS) || refused != pgrole.ErrCannotBypassRLS {
		t.Fatalf("Connect as speculapro_app: %v (the process was stopped with %v), want ErrCannotBypassRLS, unwrapped", err, refused)
	}
}
