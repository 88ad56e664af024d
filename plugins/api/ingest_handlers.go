package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"
	"golang.org/x/time/rate"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
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
	Conflict  int          `json:"conflict"`
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
		// After the body is read: a client sending slowly holds no slot.
		if !a.enter(r.Context(), ws) {
			w.Header().Set("Retry-After", "1")
			return writeError(w, http.StatusServiceUnavailable, errors.New("too many requests being worked on; send it again in a second"))
		}
		defer a.leave()
		var slab recordSlab
		parsed, err := decodeBatchInto(body, kind, ws, time.Now().UTC(), a.maxItems, a.protector, &slab)
		switch {
		case errors.Is(err, errTooManyItems):
			slab.release()
			return writeError(w, http.StatusRequestEntityTooLarge, err)
		case err != nil:
			slab.release()
			return writeError(w, http.StatusBadRequest, err)
		}
		results, settled := a.answerBatch(r.Context(), ws, kind, topic, parsed)
		if settled {
			slab.release()
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
// taking turns with the other workspaces waiting (turnTaker): false when the
// client gave up, the API is closing or no turn came within the ack timeout
// (the requests being worked on wait for a Kafka that does not answer).
func (a *ingestAPI) enter(ctx context.Context, ws event.UUID) bool {
	return a.turns.enter(ctx, ws.String(), a.ackTimeout, a.closing)
}

// leave gives the request's turn to the next in line.
func (a *ingestAPI) leave() { a.turns.leave() }

// answerBuffers are the buffers batch answers are written in (one is about
// 120 bytes an item), reused: the writer copies what it is given.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// writeBatchResponse writes a batch answer exactly as writeJSON would
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
		b = appendHTMLSafeString(append(b, `,"external_id":`...), r.ExternalID)
	}
	b = appendHTMLSafeString(append(b, `,"status":`...), r.Status)
	if r.ID != "" {
		b = appendHTMLSafeString(append(b, `,"id":`...), r.ID)
	}
	if len(r.Errors) > 0 {
		b = append(b, `,"errors":[`...)
		for i, e := range r.Errors {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendHTMLSafeString(append(b, `{"field":`...), e.Field)
			b = appendHTMLSafeString(append(b, `,"message":`...), e.Message)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.Message != "" {
		b = appendHTMLSafeString(append(b, `,"message":`...), r.Message)
	}
	return append(b, '}')
}

// answerBatch decides every item: rejected ones by their errors, repeats
// within the request like their first copy, resends by the ID the
// external_id was first accepted under (Redis, then the database), and the
// rest by the pipeline's acknowledgement. settled is false while the
// output may still read the records (see deliver).
func (a *ingestAPI) answerBatch(ctx context.Context, ws event.UUID, kind event.Kind, topic string, parsed []parsedItem) (results []itemResult, settled bool) {
	results = takeResults(len(parsed))
	settled = true
	first := make(map[string]int, len(parsed)) // external_id → index of its first valid item
	hashes := make([][8]byte, len(parsed))
	candidates := make([]*item, 0, len(parsed))
	// The answers' IDs are cut from one buffer, never written again: one
	// allocation a request, not one an item.
	ids := make([]byte, 0, 36*len(parsed))
	for i, p := range parsed {
		results[i] = itemResult{Index: i, ExternalID: p.item.externalID}
		if len(p.errors) > 0 {
			results[i].Status, results[i].Errors = statusRejected, p.errors
			continue
		}
		hashes[i] = a.contentHash(ws, &parsed[i].item)
		start := len(ids)
		ids = appendUUIDText(ids, p.item.id)
		results[i].ID = unsafe.String(unsafe.SliceData(ids[start:]), len(ids)-start)
		if _, seen := first[p.item.externalID]; seen {
			continue // answered like its first copy, below
		}
		first[p.item.externalID] = i
		candidates = append(candidates, &parsed[i].item)
	}
	if len(candidates) > 0 {
		settled = a.decide(ctx, ws, kind, topic, candidates, hashes, results)
	}
	for i, p := range parsed {
		if results[i].Status != "" {
			continue
		}
		fi := first[p.item.externalID]
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

// resultSlices are requests' answers, reused (up to maxItemsDefault): 5 %
// of the bytes allocated at the benchmark's load.
var resultSlices = sync.Pool{New: func() any { s := make([]itemResult, 0, maxItemsDefault); return &s }}

// takeResults returns n zero results, from the pool when n fits.
func takeResults(n int) []itemResult {
	if n > maxItemsDefault {
		return make([]itemResult, n)
	}
	return (*resultSlices.Get().(*[]itemResult))[:n] // zero: releaseResults cleared them
}

// releaseResults gives a request's results back once its answer is
// written, cleared whole so that the pool keeps none of its strings alive.
func releaseResults(r []itemResult) {
	if cap(r) != maxItemsDefault {
		return
	}
	r = r[:cap(r)]
	clear(r)
	r = r[:0]
	resultSlices.Put(&r)
}

// msgConflict answers a resend whose content differs from the first.
const msgConflict = "this external_id was accepted with other content; the first is kept (send a new external_id for a new transaction)"

// contentHash is the hash a resend is compared by (see contentHash), of
// the envelope as it leaves for Kafka: its counterparty protected already.
func (a *ingestAPI) contentHash(_ event.UUID, it *item) [8]byte {
	return contentHash(&it.env)
}

// decide answers the first copy of each external_id of a request:
//   - Redis first (a claim per external_id, SET NX): an entry another
//     request wrote answers the resend with the first ID, duplicate or
//     conflict by content; a pending one (its request is sending it, or
//     died doing so) is sent again under the first ID and time, which the
//     persister stores once;
//   - a new claim is looked up in the database by (workspace_id,
//     external_id): stored already (its Redis entry expired or was lost)
//     answers with the stored ID, duplicate or conflict by the content
//     hash stored with the row (duplicate for a row stored before rows
//     kept one: its content is unknown). The lookup runs beside the
//     claim, for every candidate, rather than after it for the new claims
//     alone: at 16 × 500-item requests the two round trips one after the
//     other would be two waits in line (Redis's, PostgreSQL's) on a busy
//     machine. Only the new claims read its answer, and it says the same:
//     the row of an external_id whose Redis entry is gone was stored long
//     before this request (or, when Redis lost the entry, is covered no
//     better by a lookup a millisecond later);
//   - the rest go to the pipeline; what Kafka took is marked accepted, what
//     it did not is released.
//
// Redis unreachable: every item is answered retry. Sending without the
// check could store a resend whose occurred_at differs as a second row,
// and the client can always send again; a bad item is still answered
// rejected on its own. It returns deliver's settled (true when nothing was
// delivered).
func (a *ingestAPI) decide(ctx context.Context, ws event.UUID, kind event.Kind, topic string, candidates []*item, hashes [][8]byte, results []itemResult) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), iaProbeTimeout)
	defer cancel()
	retryAll := func(msg string) {
		for _, it := range candidates {
			results[it.index].Status, results[it.index].Message = statusRetry, msg
		}
	}
	req, err := newRequestToken()
	if err != nil {
		a.log.Errorf("ingest_api: reading a random request token: %v", err)
		retryAll("cannot check for an earlier copy now; send it again")
		return true
	}
	mine := make([]idemEntry, len(candidates))
	exts := make([]string, len(candidates))
	for i, it := range candidates {
		mine[i] = idemEntry{state: idemPending, id: it.id, hash: hashes[it.index], req: req}
		exts[i] = it.externalID
	}
	keys := a.idem.keys(kind, ws, exts)
	// Buffered, so the lookup's goroutine ends on its own (within its
	// timeout) when the claim fails and nobody reads it.
	lookup := make(chan storedLookup, 1)
	go func() {
		stored, err := a.storedIDs(ctx, ws, kind, exts)
		lookup <- storedLookup{stored, err}
	}()
	prev, err := a.idem.claim(rctx, keys, mine)
	if err != nil {
		a.logRedis(err)
		retryAll("cannot check for an earlier copy now; send it again")
		return true
	}
	a.resolvePending(rctx, prev)
	var fresh, send []int // indexes into candidates
	for i, it := range candidates {
		res := &results[it.index]
		p := prev[i]
		switch {
		case p == nil:
			fresh = append(fresh, i)
		case p.state == idemStored:
			res.Status, res.ID = statusDuplicate, p.id.String()
		case p.hash != hashes[it.index]:
			res.Status, res.ID, res.Message = statusConflict, p.id.String(), msgConflict
		case p.state == idemAccepted:
			res.Status, res.ID = statusDuplicate, p.id.String()
		default: // pending: maybe in Kafka, maybe not; the same record again is safe
			if err := it.withID(p.id); err != nil {
				res.Status, res.Message = statusRetry, "cannot resend under the first ID; send it again"
				continue
			}
			mine[i] = idemEntry{state: idemPending, id: p.id, hash: p.hash}
			res.ID = p.id.String()
			send = append(send, i)
		}
	}

	if len(fresh) > 0 {
		l := <-lookup
		stored, err := l.stored, l.err
		if err != nil {
			// The claim was new, so within the TTL nobody accepted this
			// external_id: the lookup only covers entries Redis lost or
			// expired, and Kafka, not PostgreSQL, is where an item must be
			// safe. Sending keeps ingest up while PostgreSQL is down.
			if a.rateLimited(&a.dbLogged) {
				a.log.Warnf("ingest_api: looking up %d external IDs in the database, sending them anyway: %v", len(fresh), err)
			}
		}
		var upKeys []string
		var upEntries []idemEntry
		for _, i := range fresh {
			it := candidates[i]
			row, ok := stored[it.externalID]
			if !ok {
				send = append(send, i)
				continue
			}
			res := &results[it.index]
			res.Status, res.ID = statusDuplicate, row.id.String()
			// The entry written back answers the next resends as this one
			// was: by the stored hash when the row has one (the entry is
			// then an accepted one, its hash the first content's), else
			// duplicate whatever they carry (stored).
			entry := idemEntry{state: idemStored, id: row.id, hash: hashes[it.index]}
			if row.hashed {
				entry.state, entry.hash = idemAccepted, row.hash
				if row.hash != hashes[it.index] {
					res.Status, res.Message = statusConflict, msgConflict
				}
			}
			upKeys = append(upKeys, keys[i])
			upEntries = append(upEntries, entry)
		}
		if err := a.idem.update(rctx, upKeys, upEntries); err != nil {
			a.logRedis(err)
		}
	}
	if len(send) == 0 {
		return true
	}
	items := make([]*item, len(send))
	for j, i := range send {
		items[j] = candidates[i]
	}
	settled := a.deliver(kind, topic, items, results)

	// What Kafka took: this request's own claims by its one marker, another
	// request's pending entries it sent again one by one. What Kafka did
	// not take: this request's claims are released, first, so the marker
	// never covers them.
	var accKeys, relKeys []string
	var accEntries, relEntries []idemEntry
	mark := false
	for _, i := range send {
		it := candidates[i]
		switch {
		case results[it.index].Status == statusAccepted && prev[i] == nil:
			mark = true
		case results[it.index].Status == statusAccepted:
			e := mine[i]
			e.state = idemAccepted
			accKeys, accEntries = append(accKeys, keys[i]), append(accEntries, e)
		case prev[i] == nil: // only this request's own claims
			relKeys, relEntries = append(relKeys, keys[i]), append(relEntries, mine[i])
		}
	}
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), iaProbeTimeout)
	defer ucancel()
	if err := a.idem.update(uctx, accKeys, accEntries); err != nil {
		a.logRedis(err)
	}
	if err := a.idem.release(uctx, relKeys, relEntries); err != nil {
		// The claims stay pending, read as "maybe in Kafka": a resend is
		// sent again under the first ID, safe; accepted they must not read.
		a.logRedis(err)
		return settled
	}
	if mark {
		if err := a.idem.markAccepted(uctx, req); err != nil {
			a.logRedis(err)
		}
	}
	return settled
}

// resolvePending turns the pending entries a claim found into accepted ones
// where their request's marker says Kafka took them. Best effort: a marker
// that cannot be read leaves them pending, which sends them again under
// their first ID, safe.
func (a *ingestAPI) resolvePending(ctx context.Context, prev []*idemEntry) {
	var tokens []requestToken
	seen := map[requestToken]bool{}
	for _, p := range prev {
		if p != nil && p.state == idemPending && p.req != (requestToken{}) && !seen[p.req] {
			seen[p.req] = true
			tokens = append(tokens, p.req)
		}
	}
	if len(tokens) == 0 {
		return
	}
	accepted, err := a.idem.acceptedRequests(ctx, tokens)
	if err != nil {
		a.logRedis(err)
		return
	}
	for _, p := range prev {
		if p != nil && p.state == idemPending && accepted[p.req] {
			p.state = idemAccepted
		}
	}
}

// logRedis logs a Redis failure at most once every 10 s.
func (a *ingestAPI) logRedis(err error) {
	if a.rateLimited(&a.redisLogged) {
		a.log.Warnf("ingest_api: Redis (resend check): %v", err)
	}
}

// rateLimited reports whether a WARN of the kind warns limits may be logged
// now: at most one every logEvery, so an outage logs a line every 10 s, not
// one per request.
func (a *ingestAPI) rateLimited(warns *rate.Sometimes) bool {
	due := false
	warns.Do(func() { due = true })
	return due
}

// deliver hands items to the pipeline as one batch and sets each one's
// result from the acknowledgement. It waits at most ackTimeout, whatever
// the client does: an answer must not be given before the ack, and an ack
// must be recorded even if nobody reads the answer. Account events pass
// through account_event_processors first. settled is false when the
// output may still read the records: it has them and has not acknowledged
// all of them (a timeout, a failed write); their buffers are then not
// reused.
func (a *ingestAPI) deliver(kind event.Kind, topic string, items []*item, results []itemResult) (settled bool) {
	batch := make(service.MessageBatch, len(items))
	topicValue := any(topic) // boxed once a request, not once a message
	for i, it := range items {
		m := service.NewMessage(it.value)
		m.MetaSetMut("ingest_topic", topicValue)
		m.MetaSetMut("ingest_key", it.key)
		// The envelope rides along, so a processor (feature_update, for
		// account events) reads it instead of parsing the record again; it
		// also tells which item a failed message is (failedItems).
		batch[i] = eventmsg.With(m, &it.env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.ackTimeout)
	defer cancel()

	retryAll := func(msg string) {
		for _, it := range items {
			results[it.index].Status, results[it.index].Message = statusRetry, msg
		}
	}
	if kind == event.KindAccountEvent && len(a.accountProcs) > 0 {
		var err error
		if batch, err = a.processAccountEvents(ctx, batch); err != nil {
			retryAll(fmt.Sprintf("the pipeline did not take the items within %v; send them again", a.ackTimeout))
			return true
		}
	}
	if len(batch) == 0 {
		// The processors dropped every item, which the pipeline's
		// processors did by acknowledging them: nothing to write.
		a.answerDelivered(nil, items, results)
		return true
	}
	j := &job{batch: batch, done: make(chan error, 1)}
	select {
	case a.jobs <- j:
	case <-ctx.Done():
		retryAll(fmt.Sprintf("the pipeline did not take the items within %v; send them again", a.ackTimeout))
		return true
	case <-a.closing:
		retryAll("the ingest API is shutting down; send the items again")
		return true
	}
	var ackErr error
	select {
	case ackErr = <-j.done:
	case <-ctx.Done():
		retryAll(fmt.Sprintf("Kafka did not confirm the items within %v; send them again", a.ackTimeout))
		return false
	}
	a.answerDelivered(ackErr, items, results)
	return ackErr == nil
}

// answerDelivered sets each delivered item's result from the pipeline's
// acknowledgement.
func (a *ingestAPI) answerDelivered(ackErr error, items []*item, results []itemResult) {
	failed := failedItems(ackErr, items)
	for i, it := range items {
		res := &results[it.index]
		err, bad := failed[i]
		var reason string
		var rejected bool
		if bad {
			reason, rejected = strings.CutPrefix(err.Error(), iaRejectPrefix)
			if !rejected {
				reason, rejected = strings.CutPrefix(err.Error(), iaRejectErroredPrefix)
			}
		}
		switch {
		case !bad:
			res.Status = statusAccepted
		case rejected:
			res.Status = statusRejected
			res.Errors = []FieldError{{Field: itemPath(it.index), Message: reason}}
			res.ID = ""
		default:
			a.log.Debugf("ingest_api: an item was not taken by Kafka: %v", err)
			res.Status, res.Message = statusRetry, "not in Kafka; send it again"
		}
	}
}

// processAccountEvents runs account_event_processors on a request's
// account events: one batch out, as the pipeline's processors would hand
// the output (a message a processor failed carries its error, which
// reject_errored answers rejected). The error is only ctx's: the
// processors mark their own failures on the messages.
func (a *ingestAPI) processAccountEvents(ctx context.Context, batch service.MessageBatch) (service.MessageBatch, error) {
	out, err := service.ExecuteProcessors(ctx, a.accountProcs, batch)
	if err != nil {
		return nil, fmt.Errorf("running the account-event processors: %w", err)
	}
	if len(out) == 1 {
		return out[0], nil
	}
	var flat service.MessageBatch
	for _, b := range out {
		flat = append(flat, b...)
	}
	return flat, nil
}

// failedItems maps an acknowledgement's error to the items it failed, by
// index into items. A *service.BatchError names the failed messages of the
// batch the output was given; each carries its item's envelope, which says
// which item it is (instead of a batch Indexer, which tags and copies every
// message of every request for the rare failure). A walk that does not
// account for every item, or a failed message that is not one of ours,
// fails them all: retry is always safe.
func failedItems(ackErr error, items []*item) map[int]error {
	failed := map[int]error{}
	if ackErr == nil {
		return failed
	}
	all := func() map[int]error {
		for i := range items {
			failed[i] = ackErr
		}
		return failed
	}
	var berr *service.BatchError
	if !errors.As(ackErr, &berr) || berr.IndexedErrors() == 0 {
		return all()
	}
	index := make(map[*event.Envelope]int, len(items))
	for i, it := range items {
		index[&it.env] = i
	}
	walked, ours := 0, true
	//nolint:staticcheck // walks the output's batch; the envelope, not the position, names the item
	berr.WalkMessages(func(_ int, m *service.Message, err error) bool {
		walked++
		if err == nil {
			return true
		}
		env, ok := eventmsg.Attached(m)
		i, found := index[env]
		if !ok || !found {
			ours = false
			return false
		}
		failed[i] = err
		return true
	})
	if !ours || walked != len(items) {
		clear(failed)
		return all()
	}
	return failed
}

// storedLookup is what storedIDs answered.
type storedLookup struct {
	stored map[string]storedRow
	err    error
}

// storedRow is a stored external_id: its ID and, when the row keeps one
// (hashed), the content hash it was stored with.
type storedRow struct {
	id     event.UUID
	hash   [event.ContentHashLen]byte
	hashed bool
}

// storedIDs returns the IDs the persister stored the external IDs under,
// with their content hashes, looked up by the (workspace_id, external_id)
// index of every partition.
func (a *ingestAPI) storedIDs(ctx context.Context, ws event.UUID, kind event.Kind, exts []string) (map[string]storedRow, error) {
	table := "speculapro.transactions"
	if kind == event.KindAccountEvent {
		table = "speculapro.account_events"
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), iaProbeTimeout)
	defer cancel()
	stored := make(map[string]storedRow)
	// One round trip: a batch runs as one implicit transaction, so the
	// workspace binding (set_config local) holds for the query, and no
	// BEGIN and COMMIT of their own wait on the request.
	var b pgx.Batch
	b.Queue(`SELECT set_config('speculapro.workspace_id', $1, true)`, ws.String())
	b.Queue(`SELECT external_id, id, content_hash FROM `+table+` WHERE workspace_id = $1 AND external_id = ANY($2)`, ws, exts)
	err := func() error {
		br := a.pool.SendBatch(ctx, &b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("binding the session to its workspace: %w", err)
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ext string
			var row storedRow
			var hash []byte
			if err := rows.Scan(&ext, &row.id, &hash); err != nil {
				return err
			}
			// Another length is no hash this version wrote: unknown, as NULL.
			row.hashed = len(hash) == event.ContentHashLen
			copy(row.hash[:], hash)
			stored[ext] = row
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		return br.Close()
	}()
	if err != nil {
		return nil, fmt.Errorf("querying %s for %d external IDs: %w", table, len(exts), err)
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

// handleReady is ready only while Kafka, PostgreSQL and Redis answer:
// without them items cannot be accepted (Kafka), authenticated (PostgreSQL)
// or checked for an earlier copy (Redis).
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
	status["redis"] = "ok"
	if err := a.idem.client.Ping(ctx).Err(); err != nil {
		status["redis"], status["status"], code = "unreachable", "not ready", http.StatusServiceUnavailable
	}
	return writeJSON(w, code, status)
}
