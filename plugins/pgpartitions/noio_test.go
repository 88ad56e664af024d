package pgpartitions

import (
	"context"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// The constructor does no I/O: with PostgreSQL unreachable it returns at
// once, and the first Process (where the start-up check runs) waits for
// PostgreSQL only as long as its context lasts, not for the whole start-up
// timeout.
func TestConstructorDoesNoIO(t *testing.T) {
	conf, err := pgPartitionsSpec().ParseYAML(testenv.UnreachableSystemDB, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p *pgPartitions
	if err := testenv.Within(t, "newPgPartitions", time.Second, func(context.Context) (err error) {
		p, err = newPgPartitions(conf, service.MockResources())
		return err
	}); err != nil {
		t.Fatalf("newPgPartitions: %v", err)
	}
	defer p.Close(context.Background())
	if err := testenv.Within(t, "pg_partitions Process", 5*time.Second, func(ctx context.Context) error {
		_, err := p.Process(ctx, service.NewMessage(nil))
		return err
	}); err == nil {
		t.Error("pg_partitions Process succeeded with PostgreSQL unreachable")
	}
}

func TestSpecParsesItsDefaults(t *testing.T) {
	if _, err := pgPartitionsSpec().ParseYAML("{}", nil); err != nil {
		t.Errorf("pg_partitions defaults: %v", err)
	}
}
