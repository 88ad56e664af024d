package pgretry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redpanda-data/benthos/v4/public/service"
)

type count struct{ n int64 }

func (c *count) Incr(n int64, _ ...string) { c.n += n }

func newPolicy(waits bool) (*Policy, *count, *count) {
	retries, faults := &count{}, &count{}
	return &Policy{
		Initial: time.Millisecond, Max: 2 * time.Millisecond,
		Retries: retries, Faults: faults, Label: "t",
		Log: service.MockResources().Logger(), RetryLine: "test: retrying",
		WaitForPartitions: waits,
	}, retries, faults
}

var (
	errPermission       = &pgconn.PgError{Code: pgerrcode.InsufficientPrivilege}
	errConnection       = &pgconn.PgError{Code: pgerrcode.ConnectionFailure}
	errShutdown         = &pgconn.PgError{Code: pgerrcode.AdminShutdown}
	errMissingPartition = &pgconn.PgError{Code: pgerrcode.CheckViolation, TableName: "transactions"}
)

// What each failure asks for, and how it is counted: a retry per backoff
// that follows here (a lost connection's waits are Reconnect's), the
// batch's fault once,
// nothing for a partition's wait (its caller counts it) or a shutdown.
func TestBatchDo(t *testing.T) {
	for _, tt := range []struct {
		name             string
		waits            bool
		fails            []error
		want             error
		retries, faulted int64
	}{
		{"fixed after two retries", false, []error{errPermission, errPermission}, nil, 2, 1},
		{"connection lost", false, []error{errPermission, errConnection}, service.ErrNotConnected, 1, 1},
		{"server shutting down", false, []error{errShutdown}, service.ErrNotConnected, 0, 1},
		{"missing partition waits", true, []error{errMissingPartition}, ErrMustWait, 0, 0},
		{"missing partition retried here", false, []error{errMissingPartition}, nil, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, retries, faults := newPolicy(tt.waits)
			calls := 0
			err := p.Batch().Do(context.Background(), 3, func(context.Context) error {
				calls++
				if calls <= len(tt.fails) {
					return tt.fails[calls-1]
				}
				return nil
			})
			if (tt.want == nil && err != nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("Do: %v, want %v", err, tt.want)
			}
			if retries.n != tt.retries || faults.n != tt.faulted {
				t.Errorf("retries %d, faults %d; want %d and %d", retries.n, faults.n, tt.retries, tt.faulted)
			}
		})
	}
}

func TestShutdownIsNoFault(t *testing.T) {
	p, retries, faults := newPolicy(false)
	ctx, cancel := context.WithCancel(context.Background())
	err := p.Batch().Do(ctx, 1, func(context.Context) error {
		cancel()
		return errConnection
	})
	if !errors.Is(err, context.Canceled) || retries.n != 0 || faults.n != 0 {
		t.Errorf("Do at shutdown: %v, %d retries, %d faults; want the context's error and nothing counted", err, retries.n, faults.n)
	}
}

// A batch whose steps fail one after the other is one fault.
func TestOneFaultPerBatch(t *testing.T) {
	p, retries, faults := newPolicy(false)
	b := p.Batch()
	for range 2 {
		calls := 0
		if err := b.Keep(context.Background(), 1, func(context.Context) error {
			if calls++; calls == 1 {
				return errors.New("dead-letter output busy")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if retries.n != 2 || faults.n != 1 {
		t.Errorf("retries %d, faults %d; want 2 and 1", retries.n, faults.n)
	}
}

// After a batch met a lost connection, Reconnect waits for PostgreSQL with
// the policy's backoff, counting each wait as a retry of that batch and no
// second fault; without a loss it pings once and counts nothing; at
// shutdown it returns the context's error.
func TestReconnectCountsItsWaits(t *testing.T) {
	p, retries, faults := newPolicy(false)
	pings := 0
	down := func(context.Context) error {
		pings++
		if pings <= 2 {
			return errConnection
		}
		return nil
	}
	if err := p.Reconnect(context.Background(), "test", down); err == nil || retries.n != 0 {
		t.Fatalf("Reconnect without a loss: %v, %d retries; want the ping's error and none counted", err, retries.n)
	}
	if err := p.Batch().Do(context.Background(), 3, func(context.Context) error { return errConnection }); !errors.Is(err, service.ErrNotConnected) {
		t.Fatalf("Do: %v, want ErrNotConnected", err)
	}
	if err := p.Reconnect(context.Background(), "test", down); err != nil {
		t.Fatalf("Reconnect after the loss: %v", err)
	}
	if pings != 3 || retries.n != 1 || faults.n != 1 {
		t.Errorf("%d pings, %d retries, %d faults; want 3 pings (one before the loss), 1 retry, 1 fault", pings, retries.n, faults.n)
	}
	if err := p.Reconnect(context.Background(), "test", func(context.Context) error { return nil }); err != nil || retries.n != 1 {
		t.Errorf("Reconnect once connected: %v, %d retries; want nil and no new retry", err, retries.n)
	}
	if err := p.Batch().Do(context.Background(), 3, func(context.Context) error { return errConnection }); !errors.Is(err, service.ErrNotConnected) {
		t.Fatalf("Do: %v, want ErrNotConnected", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Reconnect(ctx, "test", func(context.Context) error { return errConnection }); !errors.Is(err, context.Canceled) {
		t.Errorf("Reconnect at shutdown: %v, want context.Canceled", err)
	}
}
