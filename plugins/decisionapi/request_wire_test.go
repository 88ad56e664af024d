package decisionapi

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/devtools/apisample"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// TestBothAPIsReadOneWay: the ingest API (an item of a batch) and the
// decision API (its one transaction) read the same bytes through the one
// check of request_wire.go and the one field reader, so the same fault is
// refused by both, on the same field (the batch's under items[0]), in the
// same words, exactly once; the same value at a limit is accepted by both.
func TestBothAPIsReadOneWay(t *testing.T) {
	edit := func(old, new string) string {
		t.Helper()
		if !strings.Contains(apisample.Transaction, old) {
			t.Fatalf("apisample.Transaction lacks %s", old)
		}
		return strings.Replace(apisample.Transaction, old, new, 1)
	}
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	meta := `"metadata":{ "ip": "203.0.113.7" }`
	bigMeta := func(n int) string { // metadata of exactly n bytes
		return `{"p":"` + strings.Repeat("x", n-8) + `"}`
	}
	tests := []struct {
		name, txn   string
		field, text string // "": accepted
	}{
		{"key named twice at the top", edit(`"amount":"1249.90"`, `"amount":"1249.90","amount":"1.00"`), "amount", event.ReasonDuplicateKey},
		{"key named twice, the second bad", edit(`"amount":"1249.90"`, `"amount":"1249.90","amount":12`), "amount", event.ReasonDuplicateKey},
		{"key named twice in the counterparty", edit(`"identifier_kind":"iban"`, `"identifier_kind":"iban","identifier_kind":"phone"`), "counterparty.identifier_kind", event.ReasonDuplicateKey},
		{"key named twice in nested metadata", edit(meta, `"metadata":{"a":[{"b":1,"b":2}]}`), "metadata.a[0].b", event.ReasonDuplicateKey},
		{"unknown key named twice", edit(`"type":"transfer"`, `"type":"transfer","x":1,"x":2`), "x", event.ReasonDuplicateKey},
		{"number in metadata too long", edit(meta, `"metadata":{"n":1e1001}`), "metadata.n", "a number with more than 1000 digits before or after the point"},
		{"number in metadata at the limit", edit(meta, `"metadata":{"n":1e999}`), "", ""},
		{"metadata nested too deep", edit(meta, `"metadata":{"a":`+deep(64)+`}`), "metadata", event.ReasonTooDeep},
		{"metadata nested to the limit", edit(meta, `"metadata":{"a":`+deep(63)+`}`), "", ""},
		{"a string field nested far too deep", edit(`"reference":"rent"`, `"reference":`+deep(5000)), "reference", event.ReasonTooDeep},
		{"metadata too large", edit(meta, `"metadata":`+bigMeta(event.MaxObjectBytes+1)), "metadata", fmt.Sprintf("%d bytes, at most %d", event.MaxObjectBytes+1, event.MaxObjectBytes)},
		{"metadata at the size limit", edit(meta, `"metadata":`+bigMeta(event.MaxObjectBytes)), "", ""},
		{"metadata not an object", edit(meta, `"metadata":[1]`), "metadata", "want a JSON object"},
		{"NUL in a field", edit(`"reference":"rent"`, `"reference":"re\u0000nt"`), "reference", event.ReasonNUL},
		{"NUL in metadata", edit(meta, `"metadata":{"k":["ok","\u0000"]}`), "metadata.k[1]", event.ReasonNUL},
		{"lone surrogate", edit(meta, `"metadata":{"s":"\udc00"}`), "metadata.s", event.ReasonSurrogate},
		{"invalid UTF-8", edit(`"reference":"rent"`, "\"reference\":\"r\xffnt\""), "reference", event.ReasonNotUTF8},
		{"control character", edit(`"reference":"rent"`, `"reference":"re\u0001nt"`), "reference", "contains control characters"},
		{"year 1", edit(`"2026-11-30T07:41:12.345+01:00"`, `"0001-01-01T00:00:00Z"`), "occurred_at", "before 1970"},
		{"unknown field", edit(`"type":"transfer"`, `"type":"transfer","amout":"1"`), "amout", "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []apirequest.FieldError
			if tt.field != "" {
				want = []apirequest.FieldError{{Field: tt.field, Message: tt.text}}
			}
			a := &decisionAPI{protector: apisample.Protector}
			_, _, decided, err := a.parseTransaction([]byte(tt.txn), apisample.Workspace, apisample.Now)
			if err != nil {
				t.Fatalf("decision API refused the request as a whole: %v", err)
			}
			if !reflect.DeepEqual(decided, want) {
				t.Errorf("decision API: %v\nwant          %v", decided, want)
			}
			got, err := apirequest.DecodeBatch(apisample.Batch(apisample.Transaction, tt.txn), event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector)
			if err != nil {
				t.Fatalf("ingest API refused the request as a whole: %v", err)
			}
			if len(got[0].Errors) > 0 {
				t.Errorf("ingest API rejected the valid item beside it: %v", got[0].Errors)
			}
			var ingested []apirequest.FieldError
			for _, fe := range got[1].Errors {
				ingested = append(ingested, apirequest.FieldError{Field: strings.TrimPrefix(fe.Field, "items[1]."), Message: fe.Message})
			}
			if !reflect.DeepEqual(ingested, want) {
				t.Errorf("ingest API: %v\nwant        %v", got[1].Errors, want)
			}
			if want == nil {
				if _, err := event.Decode(got[1].Item.Value); err != nil {
					t.Errorf("accepted, but the persister refuses it: %v", err)
				}
			}
		})
	}
}

// TestBothAPIsRefuseBodiesAlike: what cannot be read as the request at
// all is refused as a whole, in the same words by both APIs.
func TestBothAPIsRefuseBodiesAlike(t *testing.T) {
	tests := []struct {
		name, decision, batch, text string
	}{
		{"empty", ` `, ` `, "malformed request body: empty body"},
		{"cut short", apisample.Transaction[:40], `{"items":[` + apisample.Transaction[:40], "malformed request body: JSON ends early"},
		{"a stray byte", `{"external_id" "t"}`, `{"items" []}`, "malformed request body: invalid JSON at byte"},
		{"two values", apisample.Transaction + ` {}`, string(apisample.Batch(apisample.Transaction)) + ` {}`, "malformed request body: data after the JSON value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &decisionAPI{protector: apisample.Protector}
			_, _, _, derr := a.parseTransaction([]byte(tt.decision), apisample.Workspace, apisample.Now)
			_, ierr := apirequest.DecodeBatch([]byte(tt.batch), event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector)
			for api, err := range map[string]error{"decision": derr, "ingest": ierr} {
				if !errors.Is(err, apirequest.ErrMalformed) || !strings.HasPrefix(err.Error(), tt.text) {
					t.Errorf("%s API: %v, want %q", api, err, tt.text)
				}
			}
		})
	}
	// A batch's own keys: named twice is refused as the request's fault,
	// whatever fault an item holds before it.
	dupAmount := strings.Replace(apisample.Transaction, `"amount":"1249.90"`, `"amount":"1","amount":"2"`, 1)
	for _, body := range []string{`{"items":[` + apisample.Transaction + `],"items":[]}`, `{"items":[` + dupAmount + `],"items":[]}`} {
		_, err := apirequest.DecodeBatch([]byte(body), event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector)
		if want := "malformed request body: items: " + event.ReasonDuplicateKey; err == nil || err.Error() != want {
			t.Errorf("items named twice: %v, want %q", err, want)
		}
	}
}
