package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/event"
)

// Sentinel errors of authentication.
var (
	// errUnauthenticated: no key, a malformed key, or a key no active
	// workspace holds; all answered 401 alike.
	errUnauthenticated = errors.New("missing, unknown or revoked API key")
	// errAuthUnavailable: the key could not be checked (PostgreSQL down).
	errAuthUnavailable = errors.New("cannot check the API key now")
)

// route is one served endpoint; each API's OpenAPI test compares its list
// with its document.
type route struct {
	method, pattern string
	authed          bool
	handle          func(w http.ResponseWriter, r *http.Request, ws event.UUID) int
}

// requestFront is what the ingest and decision APIs do alike in front of
// their handlers: the bearer API key resolved to its workspace (cached,
// looked up as the app role), the body limits and the optional in-flight
// budget, reading a JSON body, and starting and stopping the HTTP server.
// Each API embeds one and keeps its own endpoints, metrics and pools; the
// API's own lock guards srv.
type requestFront struct {
	component   string // "ingest_api", "decision_api": prefixes its logs and errors
	log         *service.Logger
	keys        *keyCache
	pool        *pgxpool.Pool // the app role: API keys (and whatever else the API reads)
	maxBody     int64
	readTimeout time.Duration // a whole request, body included, must arrive within it

	// inFlight, when set, bounds the body bytes of the requests being
	// answered (see admitted); overloaded counts the requests it refused.
	inFlight   *byteBudget
	overloaded *service.MetricCounter

	// answered records each request's outcome in the API's own metrics,
	// labelled by the route, never by the path a client sent.
	answered func(endpoint string, code int, arrived time.Time)

	srv *http.Server
}

// arrivalKey holds a request's arrival time in its context.
type arrivalKey struct{}

// handler serves routes: each request's arrival time goes into its context,
// an authenticated route gets the key's workspace (401 without a valid key,
// 503 when it cannot be checked) and a request body within the in-flight
// budget; every answer is recorded by answered.
func (f *requestFront) handler(routes []route) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		endpoint := rt.method + " " + rt.pattern
		mux.HandleFunc(endpoint, func(w http.ResponseWriter, r *http.Request) {
			arrived := time.Now()
			r = r.WithContext(context.WithValue(r.Context(), arrivalKey{}, arrived))
			var code int
			if rt.authed {
				ws, err := f.authenticate(r)
				switch {
				case errors.Is(err, errUnauthenticated):
					w.Header().Set("WWW-Authenticate", `Bearer realm="speculapro"`)
					code = writeError(w, http.StatusUnauthorized, err)
				case err != nil:
					// A client that hung up cancelled the lookup itself:
					// that is no fault of PostgreSQL's. A full lookup lane
					// is a flood of unknown keys, answered 503 per request:
					// not one WARN each.
					if r.Context().Err() == nil && !errors.Is(err, errLookupBusy) {
						f.log.Warnf("%s: %v", f.component, err)
					}
					code = writeError(w, http.StatusServiceUnavailable, errAuthUnavailable)
				default:
					code = f.admitted(w, r, func() int { return rt.handle(w, r, ws) })
				}
			} else {
				code = rt.handle(w, r, event.UUID{})
			}
			if f.answered != nil {
				f.answered(endpoint, code, arrived)
			}
		})
	}
	return mux
}

// authenticate returns the workspace of the request's bearer key.
func (f *requestFront) authenticate(r *http.Request) (event.UUID, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return event.UUID{}, errUnauthenticated
	}
	hash, err := apikey.Hash(strings.TrimSpace(token))
	if err != nil {
		return event.UUID{}, errUnauthenticated
	}
	ws, err := f.keys.resolve(r.Context(), hash, f.lookupKey)
	if err != nil {
		return event.UUID{}, err
	}
	if ws == nil {
		return event.UUID{}, errUnauthenticated
	}
	return *ws, nil
}

// lookupKey asks PostgreSQL which active workspace holds a key hash (nil:
// none).
func (f *requestFront) lookupKey(ctx context.Context, hash []byte) (*event.UUID, error) {
	ctx, cancel := context.WithTimeout(ctx, iaProbeTimeout)
	defer cancel()
	var ws *event.UUID
	if err := f.pool.QueryRow(ctx, `SELECT speculapro.workspace_for_api_key($1)`, hash).Scan(&ws); err != nil {
		return nil, err
	}
	return ws, nil
}

// admitted runs handle while the request's body fits in the in-flight
// budget (max_in_flight_bytes), when the API has one: a request reserves its
// Content-Length (the largest body when it gives none) until it is answered,
// waiting for Kafka included, so requests in flight, and the memory they
// hold, stay bounded. Over the budget the answer is 503 with Retry-After,
// and the body is never kept (it is read and discarded, so the client gets
// the answer rather than a reset connection); a request that says it is
// larger than max_body_bytes is 413 at once.
func (f *requestFront) admitted(w http.ResponseWriter, r *http.Request, handle func() int) int {
	if f.inFlight == nil || r.Method != http.MethodPost && r.Method != http.MethodPut {
		return handle()
	}
	n := f.maxBody
	if r.ContentLength > f.maxBody {
		return writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body larger than %d bytes", f.maxBody))
	}
	if r.ContentLength >= 0 {
		n = max(r.ContentLength, 1)
	}
	if !f.inFlight.tryAcquire(n) {
		f.overloaded.Incr(1)
		// Read the body to the end without keeping it (a 32 KiB buffer), so
		// the client reads the 503 instead of a reset connection.
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, f.maxBody))
		w.Header().Set("Retry-After", "1")
		return writeError(w, http.StatusServiceUnavailable, errors.New("too many requests in flight; send it again in a second"))
	}
	defer f.inFlight.release(n)
	return handle()
}

// byteBudget is a counting semaphore of bytes that never waits.
type byteBudget struct {
	mu        sync.Mutex
	used, max int64
}

func (b *byteBudget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// readBody reads at most maxBody bytes of a JSON body. On failure it
// returns the status to answer and an error in our own words.
func (f *requestFront) readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %.40q: send application/json", ct)
	}
	body, err := readAllSized(http.MaxBytesReader(w, r.Body, f.maxBody), r.ContentLength, f.maxBody)
	var tooBig *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body larger than %d bytes", f.maxBody)
	case errors.As(err, &netErr) && netErr.Timeout():
		// The error names both sockets' addresses: log it, answer in our
		// own words.
		f.log.Debugf("%s: reading a request body: %v", f.component, err)
		return nil, http.StatusRequestTimeout, fmt.Errorf("the request body did not arrive within %v", f.readTimeout)
	case err != nil:
		f.log.Debugf("%s: reading a request body: %v", f.component, err)
		return nil, http.StatusBadRequest, errors.New("cannot read the request body (the connection broke or the body is not what Content-Length says)")
	}
	return body, 0, nil
}

// readAllSized is io.ReadAll into one buffer of the announced size (a
// body of 175 KB would otherwise be copied through a dozen doubling
// buffers), read on to EOF so that a body longer than it says still fails
// as the limit or the framing says. The buffer is the request's alone and
// never reused: the ingest API's items read their strings and metadata
// from it in place (bodyText).
func readAllSized(rd io.Reader, contentLength, max int64) ([]byte, error) {
	if contentLength <= 0 || contentLength > max {
		return io.ReadAll(rd)
	}
	buf := make([]byte, contentLength, contentLength+1)
	if _, err := io.ReadFull(rd, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	var one [1]byte
	switch _, err := io.ReadFull(rd, one[:]); {
	case errors.Is(err, io.EOF):
		return buf, nil
	case err != nil:
		return nil, err
	}
	rest, err := io.ReadAll(rd)
	if err != nil {
		return nil, err
	}
	return append(append(buf, one[0]), rest...), nil
}

// listen opens addr (so a taken address fails Connect at once) and serves
// h on it until shutdownServer.
func (f *requestFront) listen(addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: listening on %s: %w", f.component, addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// A whole body must arrive in time: a client trickling 5 MiB must
		// not hold a connection for ever.
		ReadTimeout: f.readTimeout,
		IdleTimeout: 120 * time.Second,
	}
	f.srv = srv
	// The server goroutine ends when shutdownServer shuts the server down.
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.log.Errorf("%s: serving: %v", f.component, err)
		}
	}()
	f.log.Infof("%s: listening on %s", f.component, ln.Addr())
	return nil
}

// shutdownServer stops taking requests and waits (bounded by ctx) for those in
// flight to be answered; past ctx their connections are closed. A ctx that
// ran out is no error: the server is closed either way.
func (f *requestFront) shutdownServer(ctx context.Context, srv *http.Server) error {
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// writeDocument answers with an embedded OpenAPI document.
func writeDocument(w http.ResponseWriter, doc []byte) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(doc)
	return http.StatusOK
}
