package outbox

import (
	"os"
	"strconv"
	"sync"
)

// Metadata of every message outbox_claim emits; outbox_send reads it.
const (
	MetaOutbox    = "outbox"       // webhook or notification
	MetaID        = "outbox_id"    // the row's id
	MetaWorkspace = "workspace_id" //
	MetaAttempt   = "attempt"      // this attempt's number, counting from 1
	MetaEventType = "event_type"   // webhook: event_type; notification: kind
	MetaEventID   = "event_id"     // webhook only: the idempotency key
	MetaEndpoint  = "endpoint_id"  // webhook only
	MetaChannel   = "channel"      // notification only: email or webhook
	MetaRecipient = "recipient"    // notification only: an address or a URL
)

// WorkerID names this process in claimed_by: host and process id, so an
// operator sees who holds a lease, and a test knows which rows a killed
// process held.
var WorkerID = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
})

// SlotsFreed wakes a waiting claim when outbox_send has recorded outcomes
// in this process: an endpoint whose deliveries were all in flight may
// have free slots now, and its backlog should not wait out poll_interval.
// Other processes' outcomes are seen at the next poll.
var SlotsFreed = make(chan struct{}, 1)

// SignalSlotsFreed never blocks: one pending wake-up is enough.
func SignalSlotsFreed() {
	select {
	case SlotsFreed <- struct{}{}:
	default:
	}
}

// BackoffJitter: a retry waits 80 to 100 % of its nominal backoff, so
// deliveries that failed together do not come back together.
const BackoffJitter = 0.2
