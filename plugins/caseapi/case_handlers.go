package caseapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// caseRoutes are the case API's endpoints; TestCaseOpenAPIDocumentsEveryRoute
// compares them with its document.
func (a *caseAPI) caseRoutes() []apirequest.Route {
	return []apirequest.Route{
		{Method: http.MethodGet, Pattern: "/v1/cases", Authed: true, Handle: a.handleList},
		{Method: http.MethodGet, Pattern: "/v1/cases/{id}", Authed: true, Handle: a.handleGet},
		{Method: http.MethodPost, Pattern: "/v1/cases/{id}/assign", Authed: true, Handle: a.handleChange(changeAssigned)},
		{Method: http.MethodPost, Pattern: "/v1/cases/{id}/comments", Authed: true, Handle: a.handleChange(changeCommented)},
		{Method: http.MethodPost, Pattern: "/v1/cases/{id}/status", Authed: true, Handle: a.handleChange(changeStatusChanged)},
		{Method: http.MethodPost, Pattern: "/v1/cases/{id}/close", Authed: true, Handle: a.handleChange(changeClosed)},
		{Method: http.MethodPost, Pattern: "/v1/cases/{id}/reopen", Authed: true, Handle: a.handleChange(changeReopened)},
		{Method: http.MethodGet, Pattern: "/v1/cases/openapi.json", Authed: false, Handle: apirequest.DocumentHandler(caseOpenAPIDocument)},
		{Method: http.MethodGet, Pattern: "/healthz", Authed: false, Handle: apirequest.HandleHealth},
		{Method: http.MethodGet, Pattern: "/readyz", Authed: false, Handle: a.handleReady},
	}
}

// rejected is a 400 answer: what is wrong, field by field.
type rejected struct {
	Error  string                  `json:"error"`
	Errors []apirequest.FieldError `json:"errors"`
}

func writeRejected(w http.ResponseWriter, errs []apirequest.FieldError) int {
	return apirequest.WriteJSON(w, http.StatusBadRequest, rejected{Error: "validation failed", Errors: errs})
}

// casePage is the answer to GET /v1/cases.
type casePage struct {
	Cases      []caseView `json:"cases"`
	NextCursor *string    `json:"next_cursor"`
}

// changeAnswer is the answer to a change: the case as it now is and the
// event the change appended (as webhooks carry it).
type changeAnswer struct {
	Case  json.RawMessage `json:"case"`
	Event json.RawMessage `json:"event"`
}

func (a *caseAPI) handleList(w http.ResponseWriter, r *http.Request, ws event.UUID) int {
	q, errs := parseListQuery(r.URL.Query())
	if len(errs) > 0 {
		return writeRejected(w, errs)
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.queryTimeout)
	defer cancel()
	page, next, err := a.listCases(ctx, ws, q)
	if err != nil {
		return a.unavailable(w, r, err)
	}
	ans := casePage{Cases: page}
	if next != "" {
		ans.NextCursor = &next
	}
	return apirequest.WriteJSON(w, http.StatusOK, ans)
}

func (a *caseAPI) handleGet(w http.ResponseWriter, r *http.Request, ws event.UUID) int {
	id, err := event.ParseUUID(r.PathValue("id"))
	if err != nil {
		return apirequest.WriteError(w, http.StatusNotFound, errCaseNotFound)
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.queryTimeout)
	defer cancel()
	d, err := a.getCase(ctx, ws, id)
	if errors.Is(err, errCaseNotFound) {
		return apirequest.WriteError(w, http.StatusNotFound, err)
	}
	if err != nil {
		return a.unavailable(w, r, err)
	}
	w.Header().Set("ETag", etag(d.Version))
	return apirequest.WriteJSON(w, http.StatusOK, d)
}

// handleChange serves one kind of change: If-Match first (428 without it),
// then the body, then the one statement that makes the change or says why
// not (404, 412, 409).
func (a *caseAPI) handleChange(kind changeKind) func(http.ResponseWriter, *http.Request, event.UUID) int {
	return func(w http.ResponseWriter, r *http.Request, ws event.UUID) int {
		id, err := event.ParseUUID(r.PathValue("id"))
		if err != nil {
			return apirequest.WriteError(w, http.StatusNotFound, errCaseNotFound)
		}
		version, ferr, err := parseIfMatch(r.Header)
		switch {
		case err != nil:
			return apirequest.WriteError(w, http.StatusPreconditionRequired, err)
		case ferr != nil:
			return writeRejected(w, []apirequest.FieldError{*ferr})
		}
		body, code, err := a.ReadBody(w, r)
		if err != nil {
			return apirequest.WriteError(w, code, err)
		}
		c, errs := parseChange(kind, body, r.Header)
		if len(errs) > 0 {
			return writeRejected(w, errs)
		}
		c.version = version
		ctx, cancel := context.WithTimeout(r.Context(), a.queryTimeout)
		defer cancel()
		done, err := a.applyChange(ctx, ws, id, c)
		switch {
		case errors.Is(err, errCaseNotFound):
			return apirequest.WriteError(w, http.StatusNotFound, err)
		case errors.Is(err, errStale):
			return apirequest.WriteError(w, http.StatusPreconditionFailed, err)
		case errors.Is(err, errConflict):
			return apirequest.WriteError(w, http.StatusConflict, err)
		case err != nil:
			return a.unavailable(w, r, err)
		}
		return a.answerChange(w, c, done)
	}
}

// answerChange answers a change made, counts a close by its disposition and
// hands the event to the pipeline.
func (a *caseAPI) answerChange(w http.ResponseWriter, c change, done changed) int {
	var ev struct {
		Case struct {
			Version int64 `json:"version"`
		} `json:"case"`
	}
	var parts map[string]json.RawMessage
	if err := json.Unmarshal(done.payload, &parts); err != nil || json.Unmarshal(done.payload, &ev) != nil {
		return apirequest.WriteError(w, http.StatusInternalServerError, errors.New("cannot read the case event written"))
	}
	if c.kind == changeClosed {
		a.closed.Incr(1, c.disposition)
	}
	a.changes.Incr(1, string(c.kind))
	a.emit(done.payload, c.kind)
	w.Header().Set("ETag", etag(ev.Case.Version))
	return apirequest.WriteJSON(w, http.StatusOK, changeAnswer{Case: parts["case"], Event: done.payload})
}

// emit hands a case event to the pipeline without waiting: the outbox row
// written with the change is its durable record, so with the queue full
// (the output stalled) the message is dropped and counted, never the
// change refused.
func (a *caseAPI) emit(payload []byte, kind changeKind) {
	m := service.NewMessage(payload)
	m.MetaSetMut("case_event_type", kind.eventType())
	select {
	case a.out <- m:
	default:
		a.dropped.Incr(1)
	}
}

// unavailable answers a request PostgreSQL could not serve 503 (a client
// that hung up is not logged: that is no fault of PostgreSQL's).
func (a *caseAPI) unavailable(w http.ResponseWriter, r *http.Request, err error) int {
	if r.Context().Err() == nil {
		a.dbLog.Do(func() { a.Log.Warnf("case_api: %v", err) })
	}
	w.Header().Set("Retry-After", "1")
	return apirequest.WriteError(w, http.StatusServiceUnavailable, errors.New("cases cannot be read or changed now (PostgreSQL does not answer); send it again in a second"))
}

// handleReady: ready while PostgreSQL answers as the app role.
func (a *caseAPI) handleReady(w http.ResponseWriter, r *http.Request, _ event.UUID) int {
	ctx, cancel := context.WithTimeout(r.Context(), apirequest.ProbeTimeout)
	defer cancel()
	if err := a.Pool.Ping(ctx); err != nil {
		return apirequest.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "postgres unavailable"})
	}
	return apirequest.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
