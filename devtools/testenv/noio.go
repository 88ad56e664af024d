package testenv

import (
	"context"
	"testing"
	"time"
)

// UnreachableSystemDB is the YAML of a worker component's PostgreSQL fields
// pointing at a port nothing listens on, with a start-up timeout far longer
// than a test may wait: a constructor or Connect that waits on it shows.
const UnreachableSystemDB = "url: postgres://speculapro_system:x@127.0.0.1:1/speculapro?connect_timeout=1\nstartup_timeout: 1m\n"

// Within runs f and fails t when it took longer than limit: the check that
// a component's constructor does no I/O, and that its Connect gives up when
// its context ends rather than after the start-up timeout.
func Within(t testing.TB, what string, limit time.Duration, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	if took := time.Since(start); took > limit {
		t.Errorf("%s took %s with PostgreSQL unreachable, want under %s", what, took, limit)
	}
	return err
}
