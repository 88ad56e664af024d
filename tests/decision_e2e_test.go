package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// TestDecisionE2E: the real binary on the shared Kafka, Redis and a fresh
// database. Decisions follow the real-time rules with running totals that
// include the transaction itself (the third payment out of an account within
// the hour is reviewed), alert-only rules never decide, the same external_id
// again is the same decision, and every decided transaction is stored once
// with its decision, a decisions row and a decision.created webhook.
func TestDecisionE2E(t *testing.T) {
	// Not parallel: no decision may be degraded, and a busy neighbour could hold one past SP_DECISION_TIMEOUT.
	s := newDecisionStack(t, "decision-e2e", testenv.KafkaBrokers(t), testenv.RedisURL(t), "")
	dec := s.startDecision(t, "decision", nil)
	s.startPersist(t)
	base := "http://" + s.addr
	now := time.Now().UTC()

	// Three payments out of one account, one after the other.
	answers := map[string]decisionAnswer{}
	var outcomes []string
	for i := range 3 {
		txn := decisionTxn("velo", 0, now.Add(time.Duration(i)*time.Second))
		txn["external_id"] = fmt.Sprintf("velo-%d", i)
		txn["direction"] = "out"
		body, _ := json.Marshal(txn)
		code, a, err := postDecision(base, s.key, body)
		if err != nil || code != http.StatusOK {
			t.Fatalf("decision %d: %d %v %+v", i, code, err, a)
		}
		if a.Degraded {
			t.Fatalf("decision %d degraded: %+v", i, a)
		}
		outcomes = append(outcomes, a.Decision)
		answers[a.ExternalID] = a
	}
	if strings.Join(outcomes, ",") != "approve,approve,review" {
		t.Errorf("three quick payments out of one account were decided %v, want approve,approve,review (the third sees the two before it)", outcomes)
	}
	if r := answers["velo-2"].Rules; len(r) != 1 || r[0].Rule != "d_velocity_out" || r[0].Version != 1 {
		t.Errorf("the third payment's rules = %+v, want d_velocity_out version 1 alone", r)
	}

	// A decline, and the same external_id again: the first decision.
	huge := decisionTxn("huge", 1, now)
	huge["amount"] = "9999.00"
	body, _ := json.Marshal(huge)
	_, first, _ := postDecision(base, s.key, body)
	if first.Decision != "decline" || first.Score != 90 {
		t.Errorf("a 9999.00 transaction: %+v, want decline with score 90", first)
	}
	huge["amount"] = "1.00" // changed, but the same external_id and time
	body, _ = json.Marshal(huge)
	_, again, _ := postDecision(base, s.key, body)
	if again.Decision != "decline" || !again.Repeated || again.ID != first.ID {
		t.Errorf("the same external_id again: %+v, want the first decision (decline, repeated, id %s)", again, first.ID)
	}
	answers[first.ExternalID] = first

	// A modest load at a fixed rate.
	run := newDecisionRun()
	s.sendAtRate("load", 0, 300, 100, run)
	if len(run.failures) > 0 {
		t.Fatalf("%d requests failed, e.g. %v", len(run.failures), run.failures[0])
	}
	for ext, a := range run.answers {
		if a.Degraded {
			t.Errorf("%s degraded (%s) with every service up", ext, a.Reason)
		}
		answers[ext] = a
	}
	t.Logf("p50 %v p99 %v (at 100/s)", run.quantile(0.5), run.quantile(0.99))

	s.waitStored(t, len(answers), waitBound)
	if bad := s.checkStoredOnce(t, answers, nil); len(bad) > 0 {
		t.Errorf("stored decisions differ from the answers:\n%s", strings.Join(bad, "\n"))
	}
	if got := metricOf(t, dec, "speculapro_decision_outcomes_total"); got != float64(len(answers)+1) {
		t.Errorf("speculapro_decision_outcomes_total = %v, want %d (every answer, the repeat included)", got, len(answers)+1)
	}
	if n := s.spoolLen(t); n != 0 {
		t.Errorf("spool holds %d entries with Kafka up", n)
	}
}

// TestDecisionBadInput: malformed JSON, missing and invalid fields, an
// unknown field, an unknown key and a body over the limit are answered 4xx
// with field paths, and are never decided, delivered or spooled.
func TestDecisionBadInput(t *testing.T) {
	t.Parallel()
	s := newDecisionStack(t, "decision-bad", testenv.KafkaBrokers(t), testenv.RedisURL(t), "")
	dec := s.startDecision(t, "decision", nil)
	base := "http://" + s.addr
	valid := decisionTxn("bad", 1, time.Now().UTC())
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for kk, vv := range valid {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	cases := []struct {
		name, key string
		body      []byte
		code      int
		field     string // a field path the answer must name
		text      string // or a text the error must contain
	}{
		{"malformed JSON", s.key, []byte(`{"external_id": "x",`), 400, "", "malformed"},
		{"not an object", s.key, []byte(`[1,2]`), 400, "", "malformed"},
		{"missing amount", s.key, with("amount", nil), 400, "amount", ""},
		{"missing account", s.key, with("account_external_id", nil), 400, "account_external_id", ""},
		{"negative amount", s.key, with("amount", "-5"), 400, "amount", ""},
		{"bad currency", s.key, with("currency", "EURO"), 400, "currency", ""},
		{"bad counterparty identifier", s.key, with("counterparty", map[string]any{"identifier": "DE00 0000", "identifier_kind": "iban"}), 400, "counterparty.identifier", ""},
		{"unknown field", s.key, with("amount_cents", 5), 400, "amount_cents", ""},
		{"unknown key", "spk_" + strings.Repeat("a", 43), with("x", nil), 401, "", "API key"},
		{"no key", "", with("x", nil), 401, "", "API key"},
		{"body over the limit", s.key, with("metadata", map[string]any{"pad": strings.Repeat("x", 70<<10)}), 413, "", "larger than"},
	}
	for _, c := range cases {
		code, a, err := postDecision(base, c.key, c.body)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if code != c.code {
			t.Errorf("%s: status %d, want %d (%+v)", c.name, code, c.code, a)
		}
		if a.Decision != "" {
			t.Errorf("%s: decided %s", c.name, a.Decision)
		}
		if c.field != "" {
			found := false
			for _, e := range a.Errors {
				found = found || e.Field == c.field
			}
			if !found {
				t.Errorf("%s: errors %+v do not name %s", c.name, a.Errors, c.field)
			}
		}
		if c.text != "" && !strings.Contains(a.Error, c.text) {
			t.Errorf("%s: error %q does not say %q", c.name, a.Error, c.text)
		}
	}
	time.Sleep(2 * time.Second)
	if got := metricOf(t, dec, "speculapro_decision_outcomes_total"); got != 0 {
		t.Errorf("%v decisions counted for bad input", got)
	}
	recs := consumeFor(t, s, 3*time.Second)
	if recs != 0 {
		t.Errorf("%d records on %stxn.ingested for bad input", recs, s.prefix)
	}
	if n := s.spoolLen(t); n != 0 {
		t.Errorf("spool holds %d entries for bad input", n)
	}
}
