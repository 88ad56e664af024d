package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/event"
)

// Item outcomes, as answered and as counted.
const (
	statusAccepted  = "accepted"
	statusDuplicate = "duplicate"
	statusRejected  = "rejected"
	statusRetry     = "retry"
)

// Sentinel errors of authentication.
var (
	// errUnauthenticated: no key, a malformed key, or a key no active
	// workspace holds; all answered 401 alike.
	errUnauthenticated = errors.New("missing, unknown or revoked API key")
	// errAuthUnavailable: the key could not be checked (PostgreSQL down).
	errAuthUnavailable = errors.New("cannot check the API key now")
)

// route is one served endpoint; TestOpenAPIDocumentsEveryRoute compares
// this list with openapi.json.
type route struct {
	method, pattern string
	authed          bool
	handle          func(w http.ResponseWriter, r *http.Request, ws event.UUID) int
}

func (a *ingestAPI) routeList() []route {
	return []route{
		{http.MethodPost, "/v1/transactions", true, a.handleBatch(event.KindTransaction)},
		{http.MethodPost, "/v1/account-events", true, a.handleBatch(event.KindAccountEvent)},
		{http.MethodPut, "/v1/customers/{external_id}", true, a.handleCustomer},
		{http.MethodPut, "/v1/accounts/{external_id}", true, a.handleAccount},
		{http.MethodGet, "/v1/openapi.json", false, handleOpenAPI},
		{http.MethodGet, "/healthz", false, handleHealth},
		{http.MethodGet, "/readyz", false, a.handleReady},
	}
}

// routes wraps every endpoint with authentication (where needed) and its
// request count and latency, labelled by the route, never by the path a
// client sent.
func (a *ingestAPI) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range a.routeList() {
		endpoint := rt.method + " " + rt.pattern
		mux.HandleFunc(endpoint, func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			var code int
			if rt.authed {
				ws, err := a.authenticate(r)
				switch {
				case errors.Is(err, errUnauthenticated):
					w.Header().Set("WWW-Authenticate", `Bearer realm="speculapro"`)
					code = writeError(w, http.StatusUnauthorized, err)
				case err != nil:
					// A client that hung up cancelled the lookup itself:
					// that is no fault of PostgreSQL's.
					// A full lookup lane is a flood of unknown keys, answered
					// 503 per request: not one WARN each.
					if r.Context().Err() == nil && !errors.Is(err, errLookupBusy) {
						a.log.Warnf("ingest_api: %v", err)
					}
					code = writeError(w, http.StatusServiceUnavailable, errAuthUnavailable)
				default:
					code = rt.handle(w, r, ws)
				}
			} else {
				code = rt.handle(w, r, event.UUID{})
			}
			a.requests.Incr(1, endpoint, strconv.Itoa(code))
			a.latency.Timing(time.Since(start).Nanoseconds(), endpoint)
		})
	}
	return mux
}

// authenticate returns the workspace of the request's bearer key.
func (a *ingestAPI) authenticate(r *http.Request) (event.UUID, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return event.UUID{}, errUnauthenticated
	}
	hash, err := apikey.Hash(strings.TrimSpace(token))
	if err != nil {
		return event.UUID{}, errUnauthenticated
	}
	ws, err := a.keys.resolve(r.Context(), hash, a.lookupKey)
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
func (a *ingestAPI) lookupKey(ctx context.Context, hash []byte) (*event.UUID, error) {
	ctx, cancel := context.WithTimeout(ctx, iaProbeTimeout)
	defer cancel()
	var ws *event.UUID
	if err := a.pool.QueryRow(ctx, `SELECT speculapro.workspace_for_api_key($1)`, hash).Scan(&ws); err != nil {
		return nil, err
	}
	return ws, nil
}

// itemResult is one item's answer.
type itemResult struct {
	Index      int          `json:"index"`
	ExternalID string       `json:"external_id,omitempty"`
	Status     string       `json:"status"`
	ID         string       `json:"id,omitempty"`
	Errors     []FieldError `json:"errors,omitempty"`
	Message    string       `json:"message,omitempty"`
}

// batchResponse answers a batch request.
type batchResponse struct {
	Accepted  int          `json:"accepted"`
	Duplicate int          `json:"duplicate"`
	Rejected  int          `json:"rejected"`
	Retry     int          `json:"retry"`
	Results   []itemResult `json:"results"`
}

func (a *ingestAPI) handleBatch(kind event.Kind) func(http.ResponseWriter, *http.Request, event.UUID) int {
	topic, endpoint := "txn.ingested", "POST /v1/transactions"
	if kind == event.KindAccountEvent {
		topic, endpoint = "account.events", "POST /v1/account-events"
	}
	return func(w http.ResponseWriter, r *http.Request, ws event.UUID) int {
		body, code, err := a.readBody(w, r)
		if err != nil {
			return writeError(w, code, err)
		}
		parsed, err := decodeBatch(body, kind, ws, time.Now().UTC(), a.maxItems)
		switch {
		case errors.Is(err, errTooManyItems):
			return writeError(w, http.StatusRequestEntityTooLarge, err)
		case err != nil:
			return writeError(w, http.StatusBadRequest, err)
		}
		results := a.answerBatch(r.Context(), ws, kind, topic, parsed)
		resp := batchResponse{Results: results}
		for _, res := range results {
			switch res.Status {
			case statusAccepted:
				resp.Accepted++
			case statusDuplicate:
				resp.Duplicate++
			case statusRejected:
				resp.Rejected++
			case statusRetry:
				resp.Retry++
			}
			a.items.Incr(1, endpoint, res.Status)
		}
		if resp.Retry > 0 {
			w.Header().Set("Retry-After", "10")
		}
		return writeJSON(w, http.StatusOK, resp)
	}
}

// answerBatch decides every item: rejected ones by their errors, repeats
// within the request, recent and stored duplicates, and the rest by the
// pipeline's acknowledgement.
func (a *ingestAPI) answerBatch(ctx context.Context, ws event.UUID, kind event.Kind, topic string, parsed []parsedItem) []itemResult {
	results := make([]itemResult, len(parsed))
	first := make(map[event.UUID]int, len(parsed)) // ID → index of its first valid item
	var candidates []item
	for i, p := range parsed {
		results[i] = itemResult{Index: i, ExternalID: p.item.externalID}
		if len(p.errors) > 0 {
			results[i].Status, results[i].Errors = statusRejected, p.errors
			continue
		}
		results[i].ID = p.item.id.String()
		if _, seen := first[p.item.id]; seen {
			continue // answered like its first copy, below
		}
		first[p.item.id] = i
		if a.recent.has(p.item.id) {
			results[i].Status = statusDuplicate
			continue
		}
		candidates = append(candidates, p.item)
	}

	if len(candidates) > 0 {
		stored, err := a.storedIDs(ctx, ws, kind, candidates)
		if err != nil {
			// Kafka, not PostgreSQL, is where an item must be safe: without
			// the lookup a stored item is sent again, and the persister
			// skips it.
			a.log.Warnf("ingest_api: looking up %d already stored items, sending them anyway: %v", len(candidates), err)
		}
		send := candidates[:0]
		for _, it := range candidates {
			if stored[it.id] {
				results[it.index].Status = statusDuplicate
				a.recent.add(it.id)
				continue
			}
			send = append(send, it)
		}
		if len(send) > 0 {
			a.deliver(topic, send, results)
		}
	}

	for i, p := range parsed {
		if results[i].Status != "" {
			continue
		}
		f := results[first[p.item.id]]
		switch f.Status {
		case statusAccepted, statusDuplicate:
			results[i].Status = statusDuplicate
		default:
			results[i].Status, results[i].Message = f.Status, f.Message
		}
	}
	return results
}

// deliver hands items to the pipeline as one batch and sets each one's
// result from the acknowledgement. It waits at most ackTimeout, whatever
// the client does: an answer must not be given before the ack, and an ack
// must be recorded in the recent IDs even if nobody reads the answer.
func (a *ingestAPI) deliver(topic string, items []item, results []itemResult) {
	batch := make(service.MessageBatch, len(items))
	for i, it := range items {
		m := service.NewMessage(it.value)
		m.MetaSetMut("ingest_topic", topic)
		m.MetaSetMut("ingest_key", it.key)
		batch[i] = m
	}
	j := &job{batch: batch, done: make(chan error, 1), index: batch.Index()}
	timer := time.NewTimer(a.ackTimeout)
	defer timer.Stop()

	retryAll := func(msg string) {
		for _, it := range items {
			results[it.index].Status, results[it.index].Message = statusRetry, msg
		}
	}
	select {
	case a.jobs <- j:
	case <-timer.C:
		retryAll(fmt.Sprintf("the pipeline did not take the items within %v; send them again", a.ackTimeout))
		return
	case <-a.closing:
		retryAll("the ingest API is shutting down; send the items again")
		return
	}
	var ackErr error
	select {
	case ackErr = <-j.done:
	case <-timer.C:
		retryAll(fmt.Sprintf("Kafka did not confirm the items within %v; send them again", a.ackTimeout))
		return
	}

	failed := make(map[int]error)
	var berr *service.BatchError
	if errors.As(ackErr, &berr) && berr.IndexedErrors() > 0 {
		berr.WalkMessagesIndexedBy(j.index, func(i int, _ *service.Message, err error) bool {
			if err != nil {
				failed[i] = err
			}
			return true
		})
	} else if ackErr != nil {
		for i := range items {
			failed[i] = ackErr
		}
	}
	accepted := make([]event.UUID, 0, len(items))
	for i, it := range items {
		res := &results[it.index]
		err, bad := failed[i]
		switch {
		case !bad:
			res.Status = statusAccepted
			accepted = append(accepted, it.id)
		case strings.HasPrefix(err.Error(), iaRejectPrefix):
			res.Status = statusRejected
			res.Errors = []FieldError{{Field: fmt.Sprintf("items[%d]", it.index), Message: strings.TrimPrefix(err.Error(), iaRejectPrefix)}}
			res.ID = ""
		default:
			res.Status, res.Message = statusRetry, "not in Kafka: "+err.Error()+"; send it again"
		}
	}
	a.recent.add(accepted...)
}

// storedIDs returns which items the persister already stored, looked up by
// (id, occurred_at) so each probe hits one partition's primary key.
func (a *ingestAPI) storedIDs(ctx context.Context, ws event.UUID, kind event.Kind, items []item) (map[event.UUID]bool, error) {
	table := "speculapro.transactions"
	if kind == event.KindAccountEvent {
		table = "speculapro.account_events"
	}
	ids := make([]event.UUID, len(items))
	ats := make([]time.Time, len(items))
	for i, it := range items {
		ids[i], ats[i] = it.id, it.occurredAt
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), iaProbeTimeout)
	defer cancel()
	stored := make(map[event.UUID]bool)
	err := a.inWorkspace(ctx, ws, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT t.id FROM `+table+` t
			JOIN unnest($1::uuid[], $2::timestamptz[]) AS k(id, at) ON t.id = k.id AND t.occurred_at = k.at`, ids, ats)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id event.UUID
			if err := rows.Scan(&id); err != nil {
				return err
			}
			stored[id] = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("querying %s for %d IDs: %w", table, len(items), err)
	}
	return stored, nil
}

// inWorkspace runs fn in one transaction bound to ws by row-level security.
func (a *ingestAPI) inWorkspace(ctx context.Context, ws event.UUID, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('speculapro.workspace_id', $1, true)`, ws.String()); err != nil {
			return fmt.Errorf("binding the session to its workspace: %w", err)
		}
		return fn(tx)
	})
}

// readBody reads at most maxBody bytes of a JSON body.
func (a *ingestAPI) readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %.40q: send application/json", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body larger than %d bytes", a.maxBody)
	case err != nil:
		return nil, http.StatusBadRequest, fmt.Errorf("reading the request body: %w", err)
	}
	return body, 0, nil
}

// errorResponse is every error answer's body.
type errorResponse struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, err error) int {
	return writeJSON(w, code, errorResponse{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
	return code
}

func handleHealth(w http.ResponseWriter, _ *http.Request, _ event.UUID) int {
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReady is ready only while both Kafka and PostgreSQL answer: without
// either, items cannot be accepted (Kafka) or authenticated (PostgreSQL).
func (a *ingestAPI) handleReady(w http.ResponseWriter, r *http.Request, _ event.UUID) int {
	ctx, cancel := context.WithTimeout(r.Context(), iaProbeTimeout)
	defer cancel()
	status := map[string]string{"status": "ready", "kafka": "ok", "postgres": "ok"}
	code := http.StatusOK
	if err := a.probe.Ping(ctx); err != nil {
		status["kafka"], status["status"], code = "unreachable", "not ready", http.StatusServiceUnavailable
	}
	if err := a.pool.Ping(ctx); err != nil {
		status["postgres"], status["status"], code = "unreachable", "not ready", http.StatusServiceUnavailable
	}
	return writeJSON(w, code, status)
}
