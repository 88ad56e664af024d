package outboxsend

import (
	"context"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// The constructor does no I/O, and Connect waits for PostgreSQL only as
// long as its context lasts (a SIGTERM during start-up).
func TestConstructorDoesNoIO(t *testing.T) {
	key := "encryption_key: k1:" + strings.Repeat("00", 32) + "\n"
	testenv.CheckNoIOUntilConnect(t, "outbox_send", outboxSendSpec(), key,
		func(conf *service.ParsedConfig) (*outboxSend, error) {
			return newOutboxSend(conf, service.MockResources(), 1)
		},
		func(ctx context.Context, out *outboxSend) error { return out.Connect(ctx) })
}
