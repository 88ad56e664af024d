package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// The constructors do no I/O: with PostgreSQL unreachable they return at
// once, and Connect (the processor's first Process) waits for PostgreSQL
// only as long as its context lasts (a SIGTERM during start-up), not for
// the whole start-up timeout.
func TestConstructorsDoNoIO(t *testing.T) {
	const unreachable = "url: postgres://speculapro_system:x@127.0.0.1:1/speculapro?connect_timeout=1\nstartup_timeout: 1m\n"
	mgr := service.MockResources()
	parse := func(spec *service.ConfigSpec, extra string) *service.ParsedConfig {
		t.Helper()
		conf, err := spec.ParseYAML(unreachable+extra, nil)
		if err != nil {
			t.Fatal(err)
		}
		return conf
	}
	within := func(what string, limit time.Duration, f func() error) error {
		t.Helper()
		start := time.Now()
		err := f()
		if took := time.Since(start); took > limit {
			t.Errorf("%s took %s with PostgreSQL unreachable, want under %s", what, took, limit)
		}
		return err
	}
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 300*time.Millisecond)
	}

	var in *outboxClaim
	if err := within("newOutboxClaim", time.Second, func() (err error) {
		in, err = newOutboxClaim(parse(outboxClaimSpec(), ""), mgr)
		return err
	}); err != nil {
		t.Fatalf("newOutboxClaim: %v", err)
	}
	defer in.Close(context.Background())
	ctx, cancel := short()
	defer cancel()
	if err := within("outbox_claim Connect", 5*time.Second, func() error { return in.Connect(ctx) }); err == nil {
		t.Error("outbox_claim Connect succeeded with PostgreSQL unreachable")
	}

	var out *outboxSend
	if err := within("newOutboxSend", time.Second, func() (err error) {
		out, err = newOutboxSend(parse(outboxSendSpec(), "encryption_key: k1:"+strings.Repeat("00", 32)+"\n"), mgr, 1)
		return err
	}); err != nil {
		t.Fatalf("newOutboxSend: %v", err)
	}
	defer out.Close(context.Background())
	ctx, cancel = short()
	defer cancel()
	if err := within("outbox_send Connect", 5*time.Second, func() error { return out.Connect(ctx) }); err == nil {
		t.Error("outbox_send Connect succeeded with PostgreSQL unreachable")
	}

	var p *pgPartitions
	if err := within("newPgPartitions", time.Second, func() (err error) {
		p, err = newPgPartitions(parse(pgPartitionsSpec(), ""), mgr)
		return err
	}); err != nil {
		t.Fatalf("newPgPartitions: %v", err)
	}
	defer p.Close(context.Background())
	ctx, cancel = short()
	defer cancel()
	if err := within("pg_partitions Process", 5*time.Second, func() error {
		_, err := p.Process(ctx, service.NewMessage(nil))
		return err
	}); err == nil {
		t.Error("pg_partitions Process succeeded with PostgreSQL unreachable")
	}
}
