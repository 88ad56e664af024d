package caseapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/openapicheck"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// TestCaseOpenAPIDocumentsEveryRoute: the document names exactly the routes
// served, with security exactly where a key is needed.
func TestCaseOpenAPIDocumentsEveryRoute(t *testing.T) {
	doc := openapicheck.LoadDocument(t, "case_openapi.json", caseOpenAPIDocument)
	openapicheck.CheckRoutesDocumented(t, doc, (&caseAPI{}).caseRoutes())
}

// TestCaseOpenAPIRequests: each change's documented body is the one the
// handler reads: a sample with every documented property is accepted, and
// every property the handler takes is documented.
func TestCaseOpenAPIRequests(t *testing.T) {
	doc := openapicheck.LoadDocument(t, "case_openapi.json", caseOpenAPIDocument)
	samples := map[changeKind]string{
		changeAssigned:      `{"actor":"ana","assignee":"bob"}`,
		changeCommented:     `{"actor":"ana","comment":"Called the customer."}`,
		changeStatusChanged: `{"actor":"ana","status":"investigating"}`,
		changeClosed:        `{"actor":"ana","disposition":"true_positive","note":"Confirmed."}`,
		changeReopened:      `{"actor":"ana","note":"New evidence."}`,
	}
	paths := map[changeKind]string{changeAssigned: "assign", changeCommented: "comments", changeStatusChanged: "status",
		changeClosed: "close", changeReopened: "reopen"}
	for kind, sample := range samples {
		op := doc.Paths["/v1/cases/{id}/"+paths[kind]]["post"]
		if op.RequestBody == nil {
			t.Fatalf("%s: no request body documented", kind)
		}
		schema := op.RequestBody.Content["application/json"].Schema
		var v any
		if err := json.Unmarshal([]byte(sample), &v); err != nil {
			t.Fatal(err)
		}
		if errs := doc.Validate(schema, v, string(kind)); len(errs) > 0 {
			t.Errorf("%s sample does not validate:\n%s", kind, strings.Join(errs, "\n"))
		}
		if _, errs := parseChange(kind, []byte(sample), http.Header{}); len(errs) > 0 {
			t.Errorf("%s: the handler refuses the documented sample: %v", kind, errs)
		}
		documented := map[string]bool{}
		for p := range schema.Properties {
			documented[p] = true
		}
		for _, f := range changeFields[kind] {
			if !documented[f] {
				t.Errorf("%s: the handler takes %q, the document does not name it", kind, f)
			}
		}
		if len(documented) != len(changeFields[kind]) {
			t.Errorf("%s: documented %v, the handler takes %v", kind, documented, changeFields[kind])
		}
	}
}

// TestCaseOpenAPIResponses: the answers the handlers build validate against
// the document.
func TestCaseOpenAPIResponses(t *testing.T) {
	doc := openapicheck.LoadDocument(t, "case_openapi.json", caseOpenAPIDocument)
	now := time.Now().UTC()
	who, n := "ana", int64(2)
	cv := caseView{ID: event.UUID{1}, Title: "Customer 1", Status: "open", Priority: "high", Assignee: &who,
		OpenedAt: now, UpdatedAt: now, Version: 2, AlertCount: &n}
	score := 40.0
	detail := caseDetail{caseView: cv, AlertsShown: 1, EventsTotal: 1,
		Alerts: []caseAlert{{ID: event.UUID{2}, Title: "A large amount", Severity: "high", Status: "open", CreatedAt: now,
			Hit: &ruleHit{ID: event.UUID{3}, RuleID: event.UUID{4}, Rule: &who, RuleVersion: 3, Score: &score,
				EventOccurredAt: now, HitAt: now, Features: json.RawMessage(`{"event.amount":1200}`)}}},
		Events: []caseEvent{{ID: event.UUID{5}, Kind: "assigned", Actor: &who, Body: json.RawMessage(`{"assignee":"ana"}`), CreatedAt: now}}}
	next := pageCursor{openedAt: now, id: cv.ID}.String()
	payload := json.RawMessage(`{"type":"case.assigned","id":"00000000-0000-0000-0000-000000000005","workspace_id":"00000000-0000-0000-0000-000000000006","created_at":"2026-01-01T00:00:00Z","case":{"id":"x"},"event":{"kind":"assigned","actor":"ana","body":{}}}`)
	samples := []struct {
		path, method, code string
		v                  any
	}{
		{"/v1/cases", "get", "200", casePage{Cases: []caseView{cv}, NextCursor: &next}},
		{"/v1/cases", "get", "200", casePage{Cases: []caseView{}}},
		{"/v1/cases", "get", "400", rejected{Error: "validation failed", Errors: []apirequest.FieldError{{Field: "status", Message: "one of open"}}}},
		{"/v1/cases/{id}", "get", "200", detail},
		{"/v1/cases/{id}", "get", "404", apirequest.ErrorResponse{Error: errCaseNotFound.Error()}},
		{"/v1/cases/{id}/assign", "post", "200", changeAnswer{Case: json.RawMessage(`{"id":"x"}`), Event: payload}},
		{"/v1/cases/{id}/assign", "post", "412", apirequest.ErrorResponse{Error: errStale.Error()}},
		{"/v1/cases/{id}/assign", "post", "428", apirequest.ErrorResponse{Error: errNoIfMatch.Error()}},
	}
	for _, s := range samples {
		r, documented := doc.Paths[s.path][s.method].Responses[s.code]
		if !documented {
			t.Errorf("%s %s: answer %s not documented", s.method, s.path, s.code)
			continue
		}
		schema := r.Content["application/json"].Schema
		if errs := doc.Validate(schema, openapicheck.MustJSON(t, s.v), s.method+" "+s.path+" "+s.code); len(errs) > 0 {
			t.Errorf("answer does not validate:\n%s", strings.Join(errs, "\n"))
		}
	}
}
