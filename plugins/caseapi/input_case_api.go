package caseapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"
	"golang.org/x/time/rate"

	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/config"
)

const (
	caFieldAddress      = "address"
	caFieldDBURL        = "db_url"
	caFieldMaxBodyBytes = "max_body_bytes"
	caFieldMaxConns     = "max_connections"
	caFieldTimeout      = "query_timeout"

	// caMaxBodyDefault: a comment or a note is at most 10,000 bytes.
	caMaxBodyDefault = 64 << 10
	// caQueue is how many case events may wait for the pipeline to take
	// them; beyond it they are dropped (the outbox has them).
	caQueue = 1000
)

// Metric names of the case API.
const (
	metricCasesClosed  = "speculapro_cases_closed_total"        // label disposition
	metricCaseChanges  = "speculapro_case_changes_total"        // label kind
	metricCaseRequests = "speculapro_case_api_requests_total"   // labels endpoint, code
	metricCaseLatency  = "speculapro_case_api_latency_ns"       // label endpoint
	metricCaseDropped  = "speculapro_case_events_dropped_total" // events the pipeline did not take in time
)

func caseAPISpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Network").
		Summary("SpeculaPro's case API: analysts list, read, assign, comment on, close and reopen cases; each change is one case event, announced through the outbox to webhook endpoints.").
		Description(`
Serves the case API (documented in `+"`/v1/cases/openapi.json`"+`) on its own `+"`address`"+`, with
`+"`Authorization: Bearer <API key>`"+` naming the workspace; the key needs the `+"`cases`"+` scope (403 without it). Every query runs as the
`+"`speculapro_app`"+` role bound to the key's workspace by row-level security: a case of another workspace is answered
404, like one that does not exist.

A change (assign, comment, status, close, reopen) names the acting analyst (`+"`actor`"+` in the body or the
`+"`X-SpeculaPro-Actor`"+` header) and carries `+"`If-Match`"+` with the ETag (the case's version) it was based on: without
it 428, with a stale one 412 and nothing changed. One statement updates the case only at that version, appends the
case event and queues its webhook deliveries (`+"`case.assigned`"+`, `+"`case.commented`"+`, `+"`case.status_changed`"+`,
`+"`case.closed`"+`, `+"`case.reopened`"+`) for every enabled endpoint whose `+"`event_types`"+` is empty or names it.

Each change made also leaves as a message (the event as webhooks carry it, metadata `+"`case_event_type`"+`), never
waited for: the pipeline's output may drop it. Metrics: `+"`"+metricCasesClosed+"{disposition}`"+`, `+"`"+metricCaseChanges+"{kind}`"+`,
`+"`"+metricCaseRequests+"{endpoint,code}`"+`, `+"`"+metricCaseLatency+"{endpoint}`"+`, `+"`"+metricCaseDropped+"`"+`.`).
		Fields(
			service.NewStringField(caFieldAddress).Description("Address the API listens on.").Default(config.CaseAddr.Default).
				Example("${SP_CASE_ADDR:"+config.CaseAddr.Default+"}"),
			service.NewStringField(caFieldDBURL).Description("PostgreSQL URL of the speculapro_app role (API keys and cases, under row-level security).").Secret().
				Default(config.DBURL.Default).Example("${SP_DB_URL:"+config.DBURL.Default+"}"),
			service.NewIntField(caFieldMaxConns).Description("SP_CASE_MAX_CONNECTIONS: PostgreSQL connections the API holds at most; a request beyond them waits for one within `query_timeout`.").
				Default(config.CaseMaxConns.DefaultInt()).Example("${SP_CASE_MAX_CONNECTIONS:"+config.CaseMaxConns.Default+"}"),
			service.NewDurationField(caFieldTimeout).Description("SP_CASE_QUERY_TIMEOUT: the longest one request may wait for PostgreSQL; beyond it 503 with Retry-After.").
				Default(config.CaseQueryTimeout.Default).Example("${SP_CASE_QUERY_TIMEOUT:"+config.CaseQueryTimeout.Default+"}"),
			service.NewIntField(caFieldMaxBodyBytes).Description("The largest request body, in bytes.").Default(caMaxBodyDefault).Advanced(),
		)
}

func init() {
	service.MustRegisterBatchInput("case_api", caseAPISpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
			return newCaseAPI(conf, mgr)
		})
}

type caseAPI struct {
	// Front: authentication, body limits, the server.
	apirequest.Front

	addr, dbURL  string
	maxConns     int
	queryTimeout time.Duration

	closed   *service.MetricCounter
	changes  *service.MetricCounter
	requests *service.MetricCounter
	latency  *service.MetricTimer
	dropped  *service.MetricCounter
	dbLog    rate.Sometimes

	out chan *service.Message

	mu        sync.Mutex // guards the server and the pool Connect opens
	closing   chan struct{}
	closeOnce sync.Once
}

func newCaseAPI(conf *service.ParsedConfig, mgr *service.Resources) (*caseAPI, error) {
	a := &caseAPI{
		Front: apirequest.Front{
			Component: "case_api", Scope: apikey.ScopeCases, Log: mgr.Logger(), Keys: apirequest.NewKeyCache(),
			ReadTimeout: 30 * time.Second,
		},
		closed:   mgr.Metrics().NewCounter(metricCasesClosed, "disposition"),
		changes:  mgr.Metrics().NewCounter(metricCaseChanges, "kind"),
		requests: mgr.Metrics().NewCounter(metricCaseRequests, "endpoint", "code"),
		latency:  mgr.Metrics().NewTimer(metricCaseLatency, "endpoint"),
		dropped:  mgr.Metrics().NewCounter(metricCaseDropped),
		dbLog:    rate.Sometimes{Interval: apirequest.LogEvery},
		out:      make(chan *service.Message, caQueue),
		closing:  make(chan struct{}),
	}
	a.Answered = func(endpoint string, code int, arrived time.Time) {
		a.requests.Incr(1, endpoint, strconv.Itoa(code))
		a.latency.Timing(time.Since(arrived).Nanoseconds(), endpoint)
	}
	addr, errAddr := conf.FieldString(caFieldAddress)
	dbURL, errURL := conf.FieldString(caFieldDBURL)
	maxConns, errConns := conf.FieldInt(caFieldMaxConns)
	timeout, errTimeout := conf.FieldDuration(caFieldTimeout)
	maxBody, errBody := conf.FieldInt(caFieldMaxBodyBytes)
	if err := errors.Join(errAddr, errURL, errConns, errTimeout, errBody); err != nil {
		return nil, err
	}
	a.addr, a.dbURL, a.maxConns, a.queryTimeout, a.MaxBody = addr, dbURL, maxConns, timeout, int64(maxBody)
	if a.maxConns < 1 || a.queryTimeout <= 0 || a.MaxBody < 1024 {
		return nil, fmt.Errorf("case_api: %s must be at least 1, %s positive and %s at least 1 KiB",
			caFieldMaxConns, caFieldTimeout, caFieldMaxBodyBytes)
	}
	if _, err := pgxpool.ParseConfig(a.dbURL); err != nil {
		return nil, fmt.Errorf("case_api: %s: invalid PostgreSQL URL", caFieldDBURL)
	}
	return a, nil
}

// Connect opens the pool and the listener. PostgreSQL need not answer yet:
// until it does, requests are answered 503 and /readyz says why.
func (a *caseAPI) Connect(context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.Server == nil {
		return a.serve()
	}
	return nil
}

// serve opens the pool and starts the server (a.mu held).
func (a *caseAPI) serve() error {
	pool, err := apirequest.OpenPool(a.dbURL, int32(a.maxConns))
	if err != nil {
		return fmt.Errorf("case_api: %s: %w", caFieldDBURL, err)
	}
	a.Pool = pool
	if err := a.Listen(a.addr, a.Handler(a.caseRoutes())); err != nil {
		pool.Close()
		a.Pool = nil
		return err
	}
	return nil
}

// ReadBatch hands the pipeline the case events of the changes made so far
// (at least one). Their answers are given already, and the outbox holds
// each: the ack has nothing to tell anyone.
func (a *caseAPI) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	select {
	case m := <-a.out:
		return apirequest.TakeQueued(m, a.out, 100), func(context.Context, error) error { return nil }, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-a.closing:
		return nil, nil, service.ErrEndOfInput
	}
}

// Close stops taking requests, waits (bounded) for those in flight, and
// closes the pool.
func (a *caseAPI) Close(ctx context.Context) error {
	a.closeOnce.Do(func() { close(a.closing) })
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.Server == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := a.ShutdownServer(sctx, a.Server)
	cancel()
	a.Pool.Close()
	a.Server = nil
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("case_api: stopping the server: %w", err)
	}
	return nil
}
