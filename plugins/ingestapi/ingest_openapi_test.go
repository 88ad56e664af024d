package ingestapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/devtools/apisample"
	"github.com/speculapro/speculapro/devtools/openapicheck"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	openapicheck.CheckRoutesDocumented(t, loadOpenAPI(t), (&ingestAPI{}).routeList())
}

// TestOpenAPIRequestSamples: the samples are valid for the document, and
// an item using every documented property is read without an unknown field,
// so the document and the decoder name the same fields.
func TestOpenAPIRequestSamples(t *testing.T) {
	doc := loadOpenAPI(t)
	reqSchema := func(path, method string) *openapicheck.Schema {
		return doc.Paths[path][method].RequestBody.Content["application/json"].Schema
	}
	fullEvent := `{"external_id":"ev-1","occurred_at":"2026-11-30T07:00:00Z","customer_external_id":"c",` +
		`"account_external_id":"a","type":"sim_swap","attributes":{"x":1}}`
	samples := []struct {
		path, method, body string
		kind               event.Kind
	}{
		{"/v1/transactions", "post", string(apisample.Batch(apisample.Transaction, apisample.WithField(t, "channel", `"mobile"`), apisample.WithField(t, "status", `"completed"`))), event.KindTransaction},
		{"/v1/account-events", "post", string(apisample.Batch(fullEvent)), event.KindAccountEvent},
		{"/v1/customers/{external_id}", "put", `{"kind":"person","name":"Ada","country":"DE","risk_level":"low","attributes":{}}`, ""},
		{"/v1/accounts/{external_id}", "put", `{"customer_external_id":"c","kind":"current","currency":"EUR","status":"open",` +
			`"number":"DE89370400440532013000","number_kind":"iban","opened_at":"2020-01-01T00:00:00Z","closed_at":"2026-01-01T00:00:00Z","attributes":{}}`, ""},
	}
	for _, s := range samples {
		var v any
		if err := json.Unmarshal([]byte(s.body), &v); err != nil {
			t.Fatal(err)
		}
		if errs := doc.Validate(reqSchema(s.path, s.method), v, s.method+" "+s.path); len(errs) > 0 {
			t.Errorf("sample does not validate:\n%s", strings.Join(errs, "\n"))
		}
		if s.kind != "" {
			got, err := apirequest.DecodeBatch([]byte(s.body), s.kind, apisample.Workspace, apisample.Now, 10, apisample.Protector)
			if err != nil {
				t.Errorf("%s: decoder refuses the documented sample: %v", s.path, err)
				continue
			}
			for _, p := range got {
				if len(p.Errors) > 0 {
					t.Errorf("%s: decoder rejects the documented sample: %v", s.path, p.Errors)
				}
			}
		}
	}
	// Every documented item property is one the decoder reads.
	for name, kind := range map[string]event.Kind{"Transaction": event.KindTransaction, "AccountEvent": event.KindAccountEvent} {
		for prop := range doc.Components.Schemas[name].Properties {
			body := fmt.Sprintf(`{"items":[{%q:null}]}`, prop)
			if _, err := apirequest.DecodeBatch([]byte(body), kind, apisample.Workspace, apisample.Now, 10, apisample.Protector); err != nil {
				t.Errorf("%s.%s is documented but the decoder refuses it: %v", name, prop, err)
			}
		}
	}
}

// TestOpenAPIResponseSamples: the answers the handlers build validate
// against the documented response schemas.
func TestOpenAPIResponseSamples(t *testing.T) {
	doc := loadOpenAPI(t)
	respSchema := func(path, method, code string) *openapicheck.Schema {
		r, ok := doc.Paths[path][method].Responses[code]
		if !ok {
			t.Fatalf("%s %s: response %s not documented", method, path, code)
		}
		return r.Content["application/json"].Schema
	}
	batch := batchResponse{Accepted: 1, Duplicate: 1, Rejected: 1, Retry: 1, Results: []itemResult{
		{Index: 0, ExternalID: "t-1", Status: statusAccepted, ID: "0193f5a2-7c00-7abc-8def-0123456789ab"},
		{Index: 1, ExternalID: "t-1", Status: statusDuplicate, ID: "0193f5a2-7c00-7abc-8def-0123456789ab"},
		{Index: 2, Status: statusRejected, Errors: []apirequest.FieldError{{Field: "items[2].amount", Message: "required"}}},
		{Index: 3, ExternalID: "t-4", Status: statusRetry, ID: "0193f5a2-7c00-7abc-8def-0123456789ac", Message: "send it again"},
	}}
	samples := []struct {
		path, method, code string
		v                  any
	}{
		{"/v1/transactions", "post", "200", batch},
		{"/v1/account-events", "post", "200", batch},
		{"/v1/transactions", "post", "400", apirequest.ErrorResponse{Error: "malformed request body"}},
		{"/v1/transactions", "post", "401", apirequest.ErrorResponse{Error: apirequest.ErrUnauthenticated.Error()}},
		{"/v1/customers/{external_id}", "put", "201", entityResponse{ID: "x", ExternalID: "c", Status: "created"}},
		{"/v1/accounts/{external_id}", "put", "200", entityResponse{ID: "x", ExternalID: "a", Status: "updated"}},
		{"/v1/accounts/{external_id}", "put", "422", rejectedResponse{Error: "validation failed", Errors: []apirequest.FieldError{{Field: "currency", Message: "x"}}}},
		{"/healthz", "get", "200", map[string]string{"status": "ok"}},
		{"/readyz", "get", "503", map[string]string{"status": "not ready", "kafka": "unreachable", "postgres": "ok"}},
	}
	for _, s := range samples {
		if errs := doc.Validate(respSchema(s.path, s.method, s.code), openapicheck.MustJSON(t, s.v), s.method+" "+s.path+" "+s.code); len(errs) > 0 {
			t.Errorf("answer does not validate:\n%s", strings.Join(errs, "\n"))
		}
	}
	// The validator itself must catch a missing required field.
	if errs := doc.Validate(respSchema("/v1/transactions", "post", "200"), openapicheck.MustJSON(t, map[string]any{"results": []any{}}), "x"); len(errs) == 0 {
		t.Error("validator accepted a batch answer without its counts")
	}
}

func loadOpenAPI(t *testing.T) *openapicheck.Document {
	return openapicheck.LoadDocument(t, "openapi.json", openAPIDocument)
}
