package decisionapi

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/apisample"
	"github.com/speculapro/speculapro/devtools/openapicheck"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

func loadDecisionOpenAPI(t *testing.T) *openapicheck.Document {
	return openapicheck.LoadDocument(t, "decision_openapi.json", decisionOpenAPIDocument)
}

func TestDecisionOpenAPIDocumentsEveryRoute(t *testing.T) {
	openapicheck.CheckRoutesDocumented(t, loadDecisionOpenAPI(t), (&decisionAPI{protector: apisample.Protector}).decisionRoutes())
}

// TestDecisionOpenAPIRequest: the documented transaction is the one the
// handler reads: a sample using every property validates and parses
// without errors, and each documented property is one the reader knows.
func TestDecisionOpenAPIRequest(t *testing.T) {
	doc := loadDecisionOpenAPI(t)
	reqSchema := doc.Paths["/v1/decisions"]["post"].RequestBody.Content["application/json"].Schema
	now := time.Now().UTC()
	sample := fmt.Sprintf(`{"external_id":"t-1","occurred_at":%q,"account_external_id":"a","customer_external_id":"c",
		"amount":"12.50","currency":"EUR","direction":"out","type":"transfer","status":"completed","reference":"r",
		"channel":"mobile","counterparty":{"name":"Payee","identifier":"DE89370400440532013000","identifier_kind":"iban"},
		"metadata":{"k":1}}`, now.Format(time.RFC3339Nano))
	var v any
	if err := json.Unmarshal([]byte(sample), &v); err != nil {
		t.Fatal(err)
	}
	if errs := doc.Validate(reqSchema, v, "POST /v1/decisions"); len(errs) > 0 {
		t.Errorf("sample does not validate:\n%s", strings.Join(errs, "\n"))
	}
	a := &decisionAPI{protector: apisample.Protector}
	env, cp, ferrs, err := a.parseTransaction([]byte(sample), apisample.Workspace, now)
	if err != nil || len(ferrs) > 0 || env == nil || cp == nil || cp.Identifier == "" {
		t.Fatalf("the handler refuses the documented sample: %v %v", err, ferrs)
	}
	for prop := range doc.Components.Schemas["Transaction"].Properties {
		if _, _, _, err := a.parseTransaction([]byte(fmt.Sprintf(`{%q:null}`, prop)), apisample.Workspace, now); err != nil {
			t.Errorf("Transaction.%s is documented but the handler refuses it: %v", prop, err)
		}
	}
	if _, _, ferrs, _ := a.parseTransaction([]byte(`{"amount_cents":1}`), apisample.Workspace, now); !slices.Contains(ferrs, apirequest.FieldError{Field: "amount_cents", Message: "unknown field"}) {
		t.Errorf("an undocumented field was not refused as one: %v", ferrs)
	}
}

// TestDecisionOpenAPIResponses: the answers the handler builds validate.
func TestDecisionOpenAPIResponses(t *testing.T) {
	doc := loadDecisionOpenAPI(t)
	resp := func(code string) *openapicheck.Schema {
		r, ok := doc.Paths["/v1/decisions"]["post"].Responses[code]
		if !ok {
			t.Fatalf("response %s not documented", code)
		}
		return r.Content["application/json"].Schema
	}
	decided := decisionResponse{ID: "0193f5a2-7c00-7abc-8def-0123456789ab", ExternalID: "t-1", Decision: event.OutcomeReview,
		Score: 40, Rules: []decisionRule{{Rule: "velocity", RuleID: "x", Version: 2, Action: "review", Score: 40}},
		DecidedAt: time.Now().UTC(), TookMS: 1.5}
	a := &decisionAPI{fallback: event.OutcomeReview, protector: apisample.Protector}
	degraded := a.fallbackFor(&event.Envelope{ExternalID: "t-2"}, degradedTimeout).resp
	samples := []struct {
		code string
		v    any
	}{
		{"200", decided},
		{"200", degraded},
		{"400", rejectedDecision{Error: "validation failed", Errors: []apirequest.FieldError{{Field: "amount", Message: "required"}}}},
		{"400", apirequest.ErrorResponse{Error: apirequest.ErrMalformed.Error() + ": " + event.ReasonEndsEarly}},
		{"401", apirequest.ErrorResponse{Error: apirequest.ErrUnauthenticated.Error()}},
	}
	for _, s := range samples {
		if errs := doc.Validate(resp(s.code), openapicheck.MustJSON(t, s.v), s.code); len(errs) > 0 {
			t.Errorf("answer does not validate:\n%s", strings.Join(errs, "\n"))
		}
	}
}
