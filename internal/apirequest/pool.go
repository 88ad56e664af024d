package apirequest

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
)

// poolConnectTimeout bounds each new PostgreSQL connection of an API's
// pool (a URL may set less): a request waits at most this for one while
// PostgreSQL is unreachable, rather than the operating system's minutes.
const poolConnectTimeout = 5 * time.Second

// OpenPool is an API's pool of at most maxConns connections to url. It does
// no I/O: connections are made when requests need them. The error never
// repeats the URL, which may hold a password.
func OpenPool(url string, maxConns int32) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("invalid PostgreSQL URL")
	}
	pcfg.MaxConns = maxConns
	if pcfg.ConnConfig.ConnectTimeout == 0 || pcfg.ConnConfig.ConnectTimeout > poolConnectTimeout {
		pcfg.ConnConfig.ConnectTimeout = poolConnectTimeout
	}
	return pgxpool.NewWithConfig(context.Background(), pcfg)
}

// DocumentHandler serves an embedded OpenAPI document as a route's handler.
func DocumentHandler(doc []byte) func(http.ResponseWriter, *http.Request, event.UUID) int {
	return func(w http.ResponseWriter, _ *http.Request, _ event.UUID) int { return WriteDocument(w, doc) }
}

// TakeQueued is a batch of first and whatever else is queued, at most max
// messages, without waiting: what an API's ReadBatch hands the pipeline
// once one message has arrived.
func TakeQueued(first *service.Message, queue <-chan *service.Message, max int) service.MessageBatch {
	batch := service.MessageBatch{first}
	for len(batch) < max {
		select {
		case m := <-queue:
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}
