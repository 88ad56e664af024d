package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// UnreachableSystemDB is the YAML of a worker component's PostgreSQL fields
// pointing at a port nothing listens on, with a start-up timeout far longer
// than a test may wait: a constructor or Connect that waits on it shows.
const UnreachableSystemDB = "url: postgres://speculapro_system:x@127.0.0.1:1/speculapro?connect_timeout=1\nstartup_timeout: 1m\n"

// CheckNoIOUntilConnect holds a component to the engine's contract with
// PostgreSQL unreachable (its spec parsed from UnreachableSystemDB and
// extra): build (its constructor) returns within a second,
// doing no I/O, and connect (its Connect, or the first Process where the
// start-up check runs) fails, giving up when its context ends (300 ms here)
// rather than after the start-up timeout.
func CheckNoIOUntilConnect[C interface{ Close(context.Context) error }](t *testing.T, component string, spec *service.ConfigSpec, extra string,
	build func(*service.ParsedConfig) (C, error), connect func(context.Context, C) error,
) {
	t.Helper()
	conf, err := spec.ParseYAML(UnreachableSystemDB+extra, nil)
	if err != nil {
		t.Fatalf("%s config: %v", component, err)
	}
	start := time.Now()
	c, err := build(conf)
	if took := time.Since(start); took > time.Second {
		t.Errorf("building %s took %s with PostgreSQL unreachable, want under 1s", component, took)
	}
	if err != nil {
		t.Fatalf("building %s: %v", component, err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = connect(ctx, c)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("%s Connect took %s with PostgreSQL unreachable, want under 5s", component, took)
	}
	if err == nil {
		t.Errorf("%s Connect succeeded with PostgreSQL unreachable", component)
	}
}
