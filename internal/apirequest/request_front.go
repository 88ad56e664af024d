package apirequest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/event"
)

// Sentinel errors of authentication.
var (
	// ErrUnauthenticated: no key, a malformed key, or a key no active
	// workspace holds; all answered 401 alike.
	ErrUnauthenticated = errors.New("missing, unknown or revoked API key")
	// errAuthUnavailable: the key could not be checked (PostgreSQL down).
	errAuthUnavailable = errors.New("cannot check the API key now")
	// ErrScopeMissing: a valid key without the API's scope; answered 403
	// with the scope it lacks.
	ErrScopeMissing = errors.New("this API key lacks the scope this API needs")
)

// Route is one served endpoint; each API's OpenAPI test compares its list
// with its document.
type Route struct {
	Method, Pattern string
	Authed          bool
	Handle          func(w http.ResponseWriter, r *http.Request, ws event.UUID) int
}

// Front is what the ingest and decision APIs do alike in front of
// their handlers: the bearer API key resolved to its workspace (cached,
// looked up as the app role), the body limits and the optional in-flight
// budget, reading a JSON body, and starting and stopping the HTTP server.
// Each API embeds one and keeps its own endpoints, metrics and pools; the
// API's own lock guards Server.
type Front struct {
	Component string // "ingest_api", "decision_api": prefixes its logs and errors
	// Scope is what a key must hold to be served here (403 without it).
	Scope       apikey.Scope
	Log         *service.Logger
	Keys        *keyCache
	Pool        *pgxpool.Pool // the app role: API keys (and whatever else the API reads)
	MaxBody     int64
	ReadTimeout time.Duration // a whole request, body included, must arrive within it

	// The ingest API's body budgets (see admitted), nil in the decision
	// API: InFlight holds the bytes that have arrived of every request
	// being answered (max_in_flight_bytes), WorkspaceBytes and KeyBytes the
	// announced sizes of each tenant's.
	InFlight                 *semaphore.Weighted
	WorkspaceBytes, KeyBytes *tenantShares
	// The decision API's request budgets, nil in the ingest API: requests
	// worked on at once, by the whole API and by each workspace.
	// A request beyond its workspace's share waits up to ShareWait for one
	// of the workspace's own to end: a flood that does not honour
	// Retry-After is slowed to the pace of its share, waiting, instead of
	// spinning through 429s on the cores every workspace shares.
	Working          *semaphore.Weighted
	WorkspaceWorking *tenantShares
	ShareWait        time.Duration
	// MinBodyRate (bytes a second, 0: none) must arrive within every
	// RateWindow of a body.
	MinBodyRate int64
	RateWindow  time.Duration
	// Overloaded counts the requests the process-wide budget refused,
	// Throttled (by share) those a tenant's share refused.
	Overloaded, Throttled *service.MetricCounter
	ThrottleLog           rate.Sometimes // the over-share WARN, at most every 10 s

	// MaxConns (0: no limit) is the most connections the server holds
	// open; beyond it a new one waits in the kernel's accept queue.
	MaxConns int

	// Answered records each request's outcome in the API's own metrics,
	// labelled by the route, never by the path a client sent.
	Answered func(endpoint string, code int, arrived time.Time)

	Server *http.Server
}

// ArrivalKey holds a request's arrival time in its context.
type ArrivalKey struct{}

// Handler serves routes: each request's arrival time goes into its context,
// an authenticated route gets the key's workspace (401 without a valid key,
// 503 when it cannot be checked) and a request body within the in-flight
// budget; every answer is recorded by Answered.
func (f *Front) Handler(routes []Route) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		endpoint := rt.Method + " " + rt.Pattern
		mux.HandleFunc(endpoint, func(w http.ResponseWriter, r *http.Request) {
			arrived := time.Now()
			r = r.WithContext(context.WithValue(r.Context(), ArrivalKey{}, arrived))
			var code int
			if rt.Authed {
				ws, keyID, err := f.authenticate(r)
				switch {
				case errors.Is(err, ErrUnauthenticated):
					w.Header().Set("WWW-Authenticate", `Bearer realm="speculapro"`)
					code = WriteError(w, http.StatusUnauthorized, err)
				case errors.Is(err, ErrScopeMissing):
					code = WriteError(w, http.StatusForbidden, err)
				case err != nil:
					// A client that hung up cancelled the lookup itself:
					// that is no fault of PostgreSQL's. A full lookup lane
					// is a flood of unknown keys, answered 503 per request:
					// not one WARN each.
					if r.Context().Err() == nil && !errors.Is(err, errLookupBusy) {
						f.Log.Warnf("%s: %v", f.Component, err)
					}
					code = WriteError(w, http.StatusServiceUnavailable, errAuthUnavailable)
				default:
					code = f.admitted(w, r, ws, keyID, func(r *http.Request) int { return rt.Handle(w, r, ws) })
				}
			} else {
				code = rt.Handle(w, r, event.UUID{})
			}
			if f.Answered != nil {
				f.Answered(endpoint, code, arrived)
			}
		})
	}
	return mux
}

// authenticate returns the workspace of the request's bearer key, and the
// key's hash, which names the key in the key's share; a key without the
// API's scope is ErrScopeMissing, naming the scope.
func (f *Front) authenticate(r *http.Request) (event.UUID, string, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return event.UUID{}, "", ErrUnauthenticated
	}
	hash, err := apikey.Hash(strings.TrimSpace(token))
	if err != nil {
		return event.UUID{}, "", ErrUnauthenticated
	}
	g, err := f.Keys.resolve(r.Context(), hash, f.lookupKey)
	if err != nil {
		return event.UUID{}, "", err
	}
	if g == nil {
		return event.UUID{}, "", ErrUnauthenticated
	}
	if !g.scopes.Has(f.Scope) {
		return event.UUID{}, "", fmt.Errorf("%w: %q (speculapro apikey create --scopes %s)", ErrScopeMissing, f.Scope.String(), f.Scope.String())
	}
	return g.ws, string(hash), nil
}

// lookupKey asks PostgreSQL which active workspace holds a key hash, and
// what the key may do (nil: no active workspace holds it).
func (f *Front) lookupKey(ctx context.Context, hash []byte) (*keyGrant, error) {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	var g keyGrant
	var names []string
	err := f.Pool.QueryRow(ctx, `SELECT workspace_id, scopes FROM speculapro.api_key_grant($1)`, hash).Scan(&g.ws, &names)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if g.scopes, err = apikey.ScopesOf(names); err != nil {
		return nil, err
	}
	return &g, nil
}

// admitted runs handle within the API's budgets, each refusing without
// waiting (see the fields of Front):
//   - body bytes (the ingest API's POST and PUT): a request that says it is
//     larger than max_body_bytes is 413 at once. Its announced size
//     (max_body_bytes when it gives none) counts against its API key's and
//     its workspace's shares until it is answered, so one tenant's slow or
//     numerous bodies spend only that tenant's share: beyond it 429 with
//     Retry-After. The process-wide budget holds only what has arrived
//     (ReadBody), so bodies that announce much and send little hold almost
//     none of it; when it is full the answer is 503 with Retry-After.
//   - requests worked on (the decision API): one slot of the workspace's
//     share, waited for at most shareWait (then 429), and one of the whole
//     API's (503 when none is free).
//
// A refused body is read to the end without being kept (at the minimum
// rate), so the client reads the answer rather than a reset connection.
func (f *Front) admitted(w http.ResponseWriter, r *http.Request, ws event.UUID, keyID string, handle func(*http.Request) int) int {
	if f.Working != nil {
		tenant := ws.String()
		if !f.WorkspaceWorking.acquireWithin(r.Context(), tenant, 1, f.ShareWait) {
			return f.throttle(w, r, ws, "workspace", fmt.Errorf("this workspace has too many requests being worked on (at most %d); send it again in a second", f.WorkspaceWorking.limit))
		}
		defer f.WorkspaceWorking.release(tenant, 1)
		if !f.Working.TryAcquire(1) {
			return f.refuse(w, r, http.StatusServiceUnavailable, errors.New("too many requests being worked on; send it again in a second"))
		}
		defer f.Working.Release(1)
		return handle(r)
	}
	if f.InFlight == nil || r.Method != http.MethodPost && r.Method != http.MethodPut {
		return handle(r)
	}
	if r.ContentLength > f.MaxBody {
		return WriteError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body larger than %d bytes", f.MaxBody))
	}
	n := f.MaxBody
	if r.ContentLength >= 0 {
		n = max(r.ContentLength, 1)
	}
	if !f.KeyBytes.tryAcquire(keyID, n) {
		return f.throttle(w, r, ws, "api_key", fmt.Errorf("this API key has too many request bytes in flight (at most %d); send it again in a second", f.KeyBytes.limit))
	}
	defer f.KeyBytes.release(keyID, n)
	if !f.WorkspaceBytes.tryAcquire(ws.String(), n) {
		return f.throttle(w, r, ws, "workspace", fmt.Errorf("this workspace has too many request bytes in flight (at most %d); send it again in a second", f.WorkspaceBytes.limit))
	}
	defer f.WorkspaceBytes.release(ws.String(), n)
	lease := &bodyLease{budget: f.InFlight}
	defer lease.release()
	return handle(r.WithContext(context.WithValue(r.Context(), leaseKey{}, lease)))
}

// leaseKey holds a request's *bodyLease in its context.
type leaseKey struct{}

// LogEvery bounds the WARN lines of an over-share tenant or a failing
// dependency: one every 10 s, not one per request.
const LogEvery = 10 * time.Second

// throttle answers a request over its tenant's share 429, counted by the
// share and logged (at most every 10 s) with the workspace.
func (f *Front) throttle(w http.ResponseWriter, r *http.Request, ws event.UUID, share string, err error) int {
	if f.Throttled != nil {
		f.Throttled.Incr(1, share)
	}
	f.ThrottleLog.Do(func() {
		f.Log.With("workspace", ws.String(), "share", share).Warnf("%s: a tenant is over its share, answering 429", f.Component)
	})
	return f.refuse(w, r, http.StatusTooManyRequests, err)
}

// refuse reads the body to its end without keeping it (at the minimum rate,
// at most max_body_bytes) and answers code with Retry-After.
func (f *Front) refuse(w http.ResponseWriter, r *http.Request, code int, err error) int {
	paced := f.pacedBody(w, r)
	_, _ = io.Copy(io.Discard, paced)
	paced.restore()
	w.Header().Set("Retry-After", "1")
	return WriteError(w, code, err)
}

// pacedBody is the request's body, at most max_body_bytes, read at no less
// than the minimum rate.
func (f *Front) pacedBody(w http.ResponseWriter, r *http.Request) *pacedBody {
	arrived, ok := r.Context().Value(ArrivalKey{}).(time.Time)
	if !ok {
		arrived = time.Now()
	}
	return newPacedBody(http.MaxBytesReader(w, r.Body, f.MaxBody), w, f.MinBodyRate, f.RateWindow, arrived.Add(f.ReadTimeout))
}

// ReadBody reads at most maxBody bytes of a JSON body, at no less than the
// minimum rate, holding what arrives of the in-flight budget (the lease
// admitted put in the context, when the API has one). On failure it returns
// the status to answer and an error in our own words.
func (f *Front) ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %.40q: send application/json", ct)
	}
	lease, _ := r.Context().Value(leaseKey{}).(*bodyLease)
	paced := f.pacedBody(w, r)
	defer paced.restore()
	body, err := readAllSized(paced, r.ContentLength, f.MaxBody, lease)
	var tooBig *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.Is(err, errBudgetFull):
		if f.Overloaded != nil {
			f.Overloaded.Incr(1)
		}
		lease.release()
		_, _ = io.Copy(io.Discard, paced)
		w.Header().Set("Retry-After", "1")
		return nil, http.StatusServiceUnavailable, errors.New("too many requests in flight; send it again in a second")
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body larger than %d bytes", f.MaxBody)
	case errors.As(err, &netErr) && netErr.Timeout() && paced.tooSlow():
		f.Log.Debugf("%s: reading a request body: %v", f.Component, err)
		return nil, http.StatusRequestTimeout, fmt.Errorf("%w: less than %d bytes a second over %v", errBodyTooSlow, f.MinBodyRate, f.RateWindow)
	case errors.As(err, &netErr) && netErr.Timeout():
		// The error names both sockets' addresses: log it, answer in our
		// own words.
		f.Log.Debugf("%s: reading a request body: %v", f.Component, err)
		return nil, http.StatusRequestTimeout, fmt.Errorf("the request body did not arrive within %v", f.ReadTimeout)
	case err != nil:
		f.Log.Debugf("%s: reading a request body: %v", f.Component, err)
		return nil, http.StatusBadRequest, errors.New("cannot read the request body (the connection broke or the body is not what Content-Length says)")
	}
	return body, 0, nil
}

// Listen opens addr (so a taken address fails Connect at once) and serves
// h on it until shutdownServer.
func (f *Front) Listen(addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: listening on %s: %w", f.Component, addr, err)
	}
	if f.MaxConns > 0 {
		ln = netutil.LimitListener(ln, f.MaxConns)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// A whole body must arrive in time: a client trickling 5 MiB must
		// not hold a connection for ever.
		ReadTimeout: f.ReadTimeout,
		IdleTimeout: 120 * time.Second,
	}
	f.Server = srv
	// The server goroutine ends when shutdownServer shuts the server down.
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.Log.Errorf("%s: serving: %v", f.Component, err)
		}
	}()
	f.Log.Infof("%s: listening on %s", f.Component, ln.Addr())
	return nil
}

// ShutdownServer stops taking requests and waits (bounded by ctx) for those in
// flight to be answered; past ctx their connections are closed. A ctx that
// ran out is no error: the server is closed either way.
func (f *Front) ShutdownServer(ctx context.Context, srv *http.Server) error {
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// WriteDocument answers with an embedded OpenAPI document.
func WriteDocument(w http.ResponseWriter, doc []byte) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(doc)
	return http.StatusOK
}
