package pgpartitions

import (
	"context"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// The constructor does no I/O, and the first Process (where the start-up
// check runs) waits for PostgreSQL only as long as its context lasts.
func TestConstructorDoesNoIO(t *testing.T) {
	testenv.CheckNoIOUntilConnect(t, "pg_partitions", pgPartitionsSpec(), "",
		func(conf *service.ParsedConfig) (*pgPartitions, error) {
			return newPgPartitions(conf, service.MockResources())
		},
		func(ctx context.Context, p *pgPartitions) error {
			_, err := p.Process(ctx, service.NewMessage(nil))
			return err
		})
}

func TestSpecParsesItsDefaults(t *testing.T) {
	if _, err := pgPartitionsSpec().ParseYAML("{}", nil); err != nil {
		t.Errorf("pg_partitions defaults: %v", err)
	}
}
