package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// seedCasesSQL writes, as the system role, cases into workspace $1 (its
// rule, the cases, their alerts and hits: seedCases gives each statement
// its arguments) with alerts each, every alert with the rule hit it came
// from (the rule at version 3) and the feature values the rule read; the cases opened a
// second apart (the newest now), one customer each; every fifth closed
// (false positive), every fifth from the second investigating, the rest
// open. INSERT … SELECT over generate_series, so a million alerts take
// seconds, not a million round trips.
var seedCasesSQL = []string{
	`INSERT INTO speculapro.rules (id, workspace_id, name, description, expression, severity, version)
	 VALUES ($2, $1, 'large amount', 'A large amount for this account', 'event.amount > 1000', 'high', 3)
	 ON CONFLICT DO NOTHING`,
	`INSERT INTO speculapro.cases (workspace_id, customer_id, group_key, title, status, priority, opened_at, disposition, closed_at)
	 SELECT $1, c.cust, 'customer:' || c.cust, 'Customer ' || g,
	        (ARRAY['closed', 'investigating', 'open', 'open', 'open'])[g % 5 + 1], 'high',
	        now() - g * interval '1 second',
	        CASE WHEN g % 5 = 0 THEN 'false_positive' END, CASE WHEN g % 5 = 0 THEN now() END
	   FROM generate_series(1, $2::int) g, LATERAL (SELECT gen_random_uuid() AS cust, g AS n) c`,
	`WITH h AS (
	     INSERT INTO speculapro.rule_hits (workspace_id, rule_id, rule_version, event_id, event_occurred_at, customer_id, score, details)
	     SELECT c.workspace_id, $2, 3, gen_random_uuid(), c.opened_at, c.customer_id, 40,
	            jsonb_build_object('rule', 'large amount', 'action', 'alert', 'severity', 'high',
	                               'reads', jsonb_build_object('event.amount', 1000 + k, 'features.account.sum_1h', 5000 + k))
	       FROM speculapro.cases c, generate_series(1, $3::int) k
	      WHERE c.workspace_id = $1
	     RETURNING id, workspace_id, rule_id, event_id, customer_id, event_occurred_at
	 )
	 INSERT INTO speculapro.alerts (workspace_id, dedupe_key, rule_id, rule_hit_id, customer_id, event_id, severity, title, case_id, created_at)
	 SELECT h.workspace_id, h.rule_id || ':' || h.event_id, h.rule_id, h.id, h.customer_id, h.event_id, 'high',
	        'A large amount for this account', c.id, h.event_occurred_at
	   FROM h JOIN speculapro.cases c ON c.workspace_id = h.workspace_id AND c.customer_id = h.customer_id`,
}

// seedCases runs seedCasesSQL on conn (the system role) and returns the rule.
func seedCases(t testing.TB, conn *pgx.Conn, ws event.UUID, cases, alertsPerCase int) event.UUID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rule := event.UUID{0x01, 0x93, byte(cases), byte(alertsPerCase)}
	copy(rule[8:], ws[:8])
	args := [][]any{{ws, rule}, {ws, cases}, {ws, rule, alertsPerCase}}
	for i, q := range seedCasesSQL {
		if _, err := conn.Exec(ctx, q, args[i]...); err != nil {
			t.Fatalf("seeding %d cases of %d alerts: %v", cases, alertsPerCase, err)
		}
	}
	return rule
}

// caseAnswer is one answer of the case API.
type caseAnswer struct {
	code int
	etag string
	body map[string]any
	raw  []byte
}

// caseCall sends one request to the case API; ifMatch and actor ("": not
// sent) go in If-Match and X-SpeculaPro-Actor. It fails t when no answer
// comes; caseTry says so instead, for goroutines other than the test's.
func caseCall(t testing.TB, method, url, key, ifMatch, actor string, body any) caseAnswer {
	t.Helper()
	a, err := caseTry(method, url, key, ifMatch, actor, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func caseTry(method, url, key, ifMatch, actor string, body any) (caseAnswer, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return caseAnswer{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return caseAnswer{}, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	if actor != "" {
		req.Header.Set("X-SpeculaPro-Actor", actor)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return caseAnswer{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	a := caseAnswer{code: resp.StatusCode, etag: resp.Header.Get("ETag")}
	if a.raw, err = io.ReadAll(resp.Body); err != nil {
		return caseAnswer{}, fmt.Errorf("%s %s: reading the answer: %w", method, url, err)
	}
	_ = json.Unmarshal(a.raw, &a.body)
	return a, nil
}

// caseRowOf is case id's changeable state as stored (conn: a role that sees
// every workspace): status, version, assignee, disposition, case events.
func caseRowOf(t testing.TB, conn *pgx.Conn, id event.UUID) string {
	t.Helper()
	var row string
	if err := conn.QueryRow(context.Background(), `SELECT format('%s v%s assignee=%s disposition=%s events=%s', status, version,
		coalesce(assignee, '-'), coalesce(disposition, '-'), (SELECT count(*) FROM speculapro.case_events e WHERE e.case_id = c.id))
		FROM speculapro.cases c WHERE id = $1`, id).Scan(&row); err != nil {
		t.Fatal(err)
	}
	return row
}
