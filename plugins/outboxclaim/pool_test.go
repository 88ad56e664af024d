package outboxclaim

import (
	"context"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// The constructor does no I/O: with PostgreSQL unreachable it returns at
// once, and Connect waits for PostgreSQL only as long as its context lasts
// (a SIGTERM during start-up), not for the whole start-up timeout.
func TestConstructorsDoNoIO(t *testing.T) {
	conf, err := outboxClaimSpec().ParseYAML(testenv.UnreachableSystemDB, nil)
	if err != nil {
		t.Fatal(err)
	}
	var in *outboxClaim
	if err := testenv.Within(t, "newOutboxClaim", time.Second, func(context.Context) (err error) {
		in, err = newOutboxClaim(conf, service.MockResources())
		return err
	}); err != nil {
		t.Fatalf("newOutboxClaim: %v", err)
	}
	defer in.Close(context.Background())
	if err := testenv.Within(t, "outbox_claim Connect", 5*time.Second, in.Connect); err == nil {
		t.Error("outbox_claim Connect succeeded with PostgreSQL unreachable")
	}
}
