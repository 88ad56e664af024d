package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// TestDecisionReadsAsIngestDoes: the real decision API and the real ingest
// API, on one workspace, are sent the same faulty transaction. A key named
// twice (a gateway keeping the first amount would see another transaction
// than the one decided and stored), nesting too deep and a truncated body
// are each refused by the decision API with the same text, on the same
// field, as the ingest API gives for that item; nothing of them is decided,
// delivered or stored, and the same external_id sent correctly afterwards
// is decided for the first time.
func TestDecisionReadsAsIngestDoes(t *testing.T) {
	t.Parallel()
	s := newDecisionStack(t, "decision-wire", testenv.KafkaBrokers(t), testenv.RedisURL(t), "")
	dec := s.startDecision(t, "decision", nil)
	s.startPersist(t)
	ingestAddr := testenv.FreeAddr(t)
	ing := newBinProcess(t).named("ingest").start(t, s.env(map[string]string{"SP_INGEST_ADDR": ingestAddr, "SP_INGEST_IDEMPOTENCY_TTL": "10m"}),
		"streams", "-o", "config/observability.yaml", "pipelines/ingest.yaml")
	ingestBase := "http://" + ingestAddr
	ingestWaitReady(t, ing, ingestBase)
	decisionBase := "http://" + s.addr

	now := time.Now().UTC()
	valid := decisionTxn("wire", 1, now)
	validJSON, _ := json.Marshal(valid)
	// Each case edits the valid transaction's JSON text: encoding/json
	// cannot write a key twice.
	edit := func(old, new string) string {
		t.Helper()
		if !strings.Contains(string(validJSON), old) {
			t.Fatalf("%s lacks %s", validJSON, old)
		}
		return strings.Replace(string(validJSON), old, new, 1)
	}
	amount := `"amount":"` + valid["amount"].(string) + `"`
	cases := []struct {
		name, txn, field string
	}{
		{"amount named twice", edit(amount, amount+`,"amount":"99999.00"`), "amount"},
		{"counterparty name named twice", edit(`"name":"Payee 1"`, `"name":"Payee 1","name":"Other"`), "counterparty.name"},
		{"metadata key named twice", edit(amount, amount+`,"metadata":{"a":{"b":1,"b":2}}`), "metadata.a.b"},
		{"nested too deep", edit(amount, amount+`,"metadata":{"x":`+strings.Repeat("[", 200)+strings.Repeat("]", 200)+`}`), "metadata"},
	}
	for _, c := range cases {
		code, d, err := postDecision(decisionBase, s.key, []byte(c.txn))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ic, ia := ingestPost(t, http.DefaultClient, ingestBase, s.key, "/v1/transactions", []byte(`{"items":[`+c.txn+`]}`))
		if ic != http.StatusOK || len(ia.Results) != 1 || ia.Results[0].Status != "rejected" || len(ia.Results[0].Errors) != 1 {
			t.Fatalf("%s: ingest answered %d %+v, want its one item rejected for one fault", c.name, ic, ia)
		}
		ie := ia.Results[0].Errors[0]
		if ie.Field != "items[0]."+c.field {
			t.Errorf("%s: ingest names %s, want items[0].%s", c.name, ie.Field, c.field)
		}
		if code != http.StatusBadRequest || d.Decision != "" || len(d.Errors) != 1 {
			t.Errorf("%s: decision answered %d %+v, want 400 with one field error", c.name, code, d)
			continue
		}
		if d.Errors[0].Field != c.field || d.Errors[0].Message != ie.Message {
			t.Errorf("%s: decision says %s: %q; ingest says %s: %q", c.name, d.Errors[0].Field, d.Errors[0].Message, ie.Field, ie.Message)
		}
	}
	// A body cut short is the request's fault, in the same words.
	cut := string(validJSON[:len(validJSON)/2])
	code, d, _ := postDecision(decisionBase, s.key, []byte(cut))
	_, ia := ingestPost(t, http.DefaultClient, ingestBase, s.key, "/v1/transactions", []byte(`{"items":[`+cut))
	if code != http.StatusBadRequest || d.Error == "" || d.Error != ia.Error {
		t.Errorf("a body cut short: decision %d %q, ingest %q; want 400 and the same text", code, d.Error, ia.Error)
	}

	// Nothing was decided: the correct transaction is a first decision,
	// and once it is stored nothing else of the workspace is.
	code, d, err := postDecision(decisionBase, s.key, validJSON)
	if err != nil || code != http.StatusOK || d.Repeated || d.Decision == "" {
		t.Fatalf("the correct transaction: %d %+v %v, want a first decision", code, d, err)
	}
	if n := s.waitStored(t, 1, waitBound); n != 1 {
		t.Fatalf("%d decisions stored, want the correct transaction's alone", n)
	}
	stored := s.stored(t)
	if len(stored) != 1 || stored[valid["external_id"].(string)] == nil || stored[valid["external_id"].(string)].txns != 1 {
		t.Errorf("stored %v, want the one correct transaction once", stored)
	}
	if got := metricOf(t, dec, "speculapro_decision_outcomes_total"); got != 1 {
		t.Errorf("speculapro_decision_outcomes_total = %v, want 1 (the correct transaction alone)", got)
	}
}
