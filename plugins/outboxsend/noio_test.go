package outboxsend

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// The constructor does no I/O: with PostgreSQL unreachable it returns at
// once, and Connect waits for PostgreSQL only as long as its context lasts
// (a SIGTERM during start-up), not for the whole start-up timeout.
func TestConstructorDoesNoIO(t *testing.T) {
	conf, err := outboxSendSpec().ParseYAML(testenv.UnreachableSystemDB+"encryption_key: k1:"+strings.Repeat("00", 32)+"\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out *outboxSend
	if err := testenv.Within(t, "newOutboxSend", time.Second, func(context.Context) (err error) {
		out, err = newOutboxSend(conf, service.MockResources(), 1)
		return err
	}); err != nil {
		t.Fatalf("newOutboxSend: %v", err)
	}
	defer out.Close(context.Background())
	if err := testenv.Within(t, "outbox_send Connect", 5*time.Second, out.Connect); err == nil {
		t.Error("outbox_send Connect succeeded with PostgreSQL unreachable")
	}
}
