package ingestapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// Item outcomes, as answered and as counted.
const (
	statusAccepted  = "accepted"
	statusDuplicate = "duplicate"
	statusRejected  = "rejected"
	statusRetry     = "retry"
	statusConflict  = "conflict"
)

// routeList is the ingest API's endpoints; TestOpenAPIDocumentsEveryRoute
// compares it with openapi.json.
func (a *ingestAPI) routeList() []apirequest.Route {
	return []apirequest.Route{
		{Method: http.MethodPost, Pattern: "/v1/transactions", Authed: true, Handle: a.handleBatch(event.KindTransaction)},
		{Method: http.MethodPost, Pattern: "/v1/account-events", Authed: true, Handle: a.handleBatch(event.KindAccountEvent)},
		{Method: http.MethodPut, Pattern: "/v1/customers/{external_id}", Authed: true, Handle: a.handleCustomer},
		{Method: http.MethodPut, Pattern: "/v1/accounts/{external_id}", Authed: true, Handle: a.handleAccount},
		{Method: http.MethodGet, Pattern: "/v1/openapi.json", Authed: false, Handle: handleOpenAPI},
		{Method: http.MethodGet, Pattern: "/healthz", Authed: false, Handle: apirequest.HandleHealth},
		{Method: http.MethodGet, Pattern: "/readyz", Authed: false, Handle: a.handleReady},
	}
}

// itemResult is one item's answer.
type itemResult struct {
	Index      int                     `json:"index"`
	ExternalID string                  `json:"external_id,omitempty"`
	Status     string                  `json:"status"`
	ID         string                  `json:"id,omitempty"`
	Errors     []apirequest.FieldError `json:"errors,omitempty"`
	Message    string                  `json:"message,omitempty"`
}

// batchResponse answers a batch request.
type batchResponse struct {
	Accepted  int          `json:"accepted"`
	Duplicate int          `json:"duplicate"`
	Rejected  int          `json:"rejected"`
	Retry     int          `json:"retry"`
	Conflict  int          `json:"conflict"`
	Results   []itemResult `json:"results"`
}

func (a *ingestAPI) handleBatch(kind event.Kind) func(http.ResponseWriter, *http.Request, event.UUID) int {
	topic, endpoint := "txn.ingested", "POST /v1/transactions"
	if kind == event.KindAccountEvent {
		topic, endpoint = "account.events", "POST /v1/account-events"
	}
	return func(w http.ResponseWriter, r *http.Request, ws event.UUID) int {
		body, code, err := a.ReadBody(w, r)
		if err != nil {
			return apirequest.WriteError(w, code, err)
		}
		// After the body is read: a client sending slowly holds no slot.
		if !a.enter(r.Context(), ws) {
			w.Header().Set("Retry-After", "1")
			return apirequest.WriteError(w, http.StatusServiceUnavailable, errors.New("too many requests being worked on; send it again in a second"))
		}
		defer a.leave()
		var slab apirequest.RecordSlab
		parsed, err := apirequest.DecodeBatchInto(body, kind, ws, time.Now().UTC(), a.maxItems, a.protector, &slab)
		switch {
		case errors.Is(err, apirequest.ErrTooManyItems):
			slab.Release()
			return apirequest.WriteError(w, http.StatusRequestEntityTooLarge, err)
		case err != nil:
			slab.Release()
			return apirequest.WriteError(w, http.StatusBadRequest, err)
		}
		results, settled := a.answerBatch(r.Context(), ws, kind, topic, parsed)
		if settled {
			slab.Release()
		}
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
			case statusConflict:
				resp.Conflict++
			}
		}
		// One counter update per outcome, not per item.
		for _, c := range []struct {
			status string
			n      int
		}{{statusAccepted, resp.Accepted}, {statusDuplicate, resp.Duplicate}, {statusRejected, resp.Rejected}, {statusRetry, resp.Retry}, {statusConflict, resp.Conflict}} {
			if c.n > 0 {
				a.items.Incr(int64(c.n), endpoint, c.status)
			}
		}
		if resp.Retry > 0 {
			w.Header().Set("Retry-After", "10")
		}
		status := writeBatchResponse(w, &resp)
		releaseResults(results) // written: nothing reads them again
		return status
	}
}

// enter waits until the request may be worked on (max_active_requests),
// taking turns with the other workspaces waiting (apirequest.TurnTaker): false when the
// client gave up, the API is closing or no turn came within the ack timeout
// (the requests being worked on wait for a Kafka that does not answer).
func (a *ingestAPI) enter(ctx context.Context, ws event.UUID) bool {
	return a.turns.Enter(ctx, ws.String(), a.ackTimeout, a.closing)
}

// leave gives the request's turn to the next in line.
func (a *ingestAPI) leave() { a.turns.Leave() }

// answerBuffers are the buffers batch answers are written in (one is about
// 120 bytes an item), reused: the writer copies what it is given.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// writeBatchResponse writes a batch answer exactly as apirequest.WriteJSON would
// (json.Marshal's bytes, TestBatchAnswerIsMarshal), from the fields
// instead of through reflection.
func writeBatchResponse(w http.ResponseWriter, resp *batchResponse) int {
	bp := answerBuffers.Get().(*[]byte)
	b := appendBatchResponse((*bp)[:0], resp)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
	if cap(b) <= 1<<20 { // a huge answer's buffer is not kept
		*bp = b[:0]
		answerBuffers.Put(bp)
	}
	return http.StatusOK
}

func appendBatchResponse(b []byte, resp *batchResponse) []byte {
	b = append(b, `{"accepted":`...)
	b = strconv.AppendInt(b, int64(resp.Accepted), 10)
	b = append(b, `,"duplicate":`...)
	b = strconv.AppendInt(b, int64(resp.Duplicate), 10)
	b = append(b, `,"rejected":`...)
	b = strconv.AppendInt(b, int64(resp.Rejected), 10)
	b = append(b, `,"retry":`...)
	b = strconv.AppendInt(b, int64(resp.Retry), 10)
	b = append(b, `,"conflict":`...)
	b = strconv.AppendInt(b, int64(resp.Conflict), 10)
	b = append(b, `,"results":`...)
	if resp.Results == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range resp.Results {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendItemResult(b, &resp.Results[i])
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendItemResult(b []byte, r *itemResult) []byte {
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(r.Index), 10)
	if r.ExternalID != "" {
		b = apirequest.AppendHTMLSafeString(append(b, `,"external_id":`...), r.ExternalID)
	}
	b = apirequest.AppendHTMLSafeString(append(b, `,"status":`...), r.Status)
	if r.ID != "" {
		b = apirequest.AppendHTMLSafeString(append(b, `,"id":`...), r.ID)
	}
	if len(r.Errors) > 0 {
		b = append(b, `,"errors":[`...)
		for i, e := range r.Errors {
			if i > 0 {
				b = append(b, ',')
			}
			b = apirequest.AppendHTMLSafeString(append(b, `{"field":`...), e.Field)
			b = apirequest.AppendHTMLSafeString(append(b, `,"message":`...), e.Message)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.Message != "" {
		b = apirequest.AppendHTMLSafeString(append(b, `,"message":`...), r.Message)
	}
	return append(b, '}')
}

// answerBatch decides every item: rejected ones by their errors, repeats
// within the request like their first copy, resends by the ID the
// external_id was first accepted under (Redis, then the database), and the
// rest by the pipeline's acknowledgement. settled is false while the
// output may still read the records (see deliver).
func (a *ingestAPI) answerBatch(ctx context.Context, ws event.UUID, kind event.Kind, topic string, parsed []apirequest.ParsedItem) (results []itemResult, settled bool) {
	results = takeResults(len(parsed))
	settled = true
	first := make(map[string]int, len(parsed)) // external_id → index of its first valid item
	hashes := make([][8]byte, len(parsed))
	candidates := make([]*apirequest.Item, 0, len(parsed))
	// The answers' IDs are cut from one buffer, never written again: one
	// allocation a request, not one an item.
	ids := make([]byte, 0, 36*len(parsed))
	for i, p := range parsed {
		results[i] = itemResult{Index: i, ExternalID: p.Item.ExternalID}
		if len(p.Errors) > 0 {
			results[i].Status, results[i].Errors = statusRejected, p.Errors
			continue
		}
		hashes[i] = a.contentHash(ws, &parsed[i].Item)
		start := len(ids)
		ids = apirequest.AppendUUIDText(ids, p.Item.ID)
		results[i].ID = unsafe.String(unsafe.SliceData(ids[start:]), len(ids)-start)
		if _, seen := first[p.Item.ExternalID]; seen {
			continue // answered like its first copy, below
		}
		first[p.Item.ExternalID] = i
		candidates = append(candidates, &parsed[i].Item)
	}
	if len(candidates) > 0 {
		settled = a.decide(ctx, ws, kind, topic, candidates, hashes, results)
	}
	for i, p := range parsed {
		if results[i].Status != "" {
			continue
		}
		fi := first[p.Item.ExternalID]
		f := results[fi]
		results[i].ID = f.ID
		switch {
		case f.Status == statusRejected || f.Status == statusRetry:
			results[i].Status, results[i].Message = f.Status, f.Message
		case hashes[i] != hashes[fi]:
			results[i].Status, results[i].Message = statusConflict, msgConflict
		default:
			results[i].Status = statusDuplicate
		}
	}
	return results, settled
}

// resultSlices are requests' answers, reused (up to apirequest.MaxItemsDefault): 5 %
// of the bytes allocated at the benchmark's load.
var resultSlices = sync.Pool{New: func() any { s := make([]itemResult, 0, apirequest.MaxItemsDefault); return &s }}

// takeResults returns n zero results, from the pool when n fits.
func takeResults(n int) []itemResult {
	if n > apirequest.MaxItemsDefault {
		return make([]itemResult, n)
	}
	return (*resultSlices.Get().(*[]itemResult))[:n] // zero: releaseResults cleared them
}

// releaseResults gives a request's results back once its answer is
// written, cleared whole so that the pool keeps none of its strings alive.
func releaseResults(r []itemResult) {
	if cap(r) != apirequest.MaxItemsDefault {
		return
	}
	r = r[:cap(r)]
	clear(r)
	r = r[:0]
	resultSlices.Put(&r)
}

// handleReady is ready only while Kafka, PostgreSQL and Redis answer:
// without them items cannot be accepted (Kafka), authenticated (PostgreSQL)
// or checked for an earlier copy (Redis).
func (a *ingestAPI) handleReady(w http.ResponseWriter, r *http.Request, _ event.UUID) int {
	ctx, cancel := context.WithTimeout(r.Context(), apirequest.ProbeTimeout)
	defer cancel()
	status := map[string]string{"status": "ready", "kafka": "ok", "postgres": "ok"}
	code := http.StatusOK
	if err := a.probe.Ping(ctx); err != nil {
		status["kafka"], status["status"], code = "unreachable", "not ready", http.StatusServiceUnavailable
	}
	if err := a.Pool.Ping(ctx); err != nil {
		status["postgres"], status["status"], code = "unreachable", "not ready", http.StatusServiceUnavailable
	}
	status["redis"] = "ok"
	if err := a.idem.client.Ping(ctx).Err(); err != nil {
		status["redis"], status["status"], code = "unreachable", "not ready", http.StatusServiceUnavailable
	}
	return apirequest.WriteJSON(w, code, status)
}
