package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// TestDecisionAfterIngest: a transaction sent through the ingest API and
// stored, then decided through the decision API (the same transaction,
// arriving a second time with its decision), carries its decision on its
// stored row, the same as its decisions row, with one decision.created
// webhook. One decided first and sent to the ingest API afterwards keeps
// its decision, and the ingest API answers it duplicate, or conflict when
// its content differs.
func TestDecisionAfterIngest(t *testing.T) {
	// Not parallel: no decision may be degraded, and a busy neighbour could hold one past SP_DECISION_TIMEOUT.
	s := newDecisionStack(t, "decision-late", testenv.KafkaBrokers(t), testenv.RedisURL(t), "")
	s.startDecision(t, "decision", nil)
	s.startPersist(t)
	ingestAddr := testenv.FreeAddr(t)
	ingest := newBinProcess(t).named("ingest")
	ingest.start(t, s.env(map[string]string{"SP_INGEST_ADDR": ingestAddr, "SP_INGEST_IDEMPOTENCY_TTL": "10m"}),
		"streams", "-o", "config/observability.yaml", "pipelines/ingest.yaml")
	ingestWaitReady(t, ingest, "http://"+ingestAddr)
	client := &http.Client{Timeout: 60 * time.Second}
	ctx := context.Background()
	now := time.Now().UTC()

	// Ingested first: a decline by amount and an approve.
	late := []map[string]any{decisionTxn("late", 0, now), decisionTxn("late", 1, now)}
	late[0]["amount"] = "9999.00"
	code, ans := ingestPost(t, client, "http://"+ingestAddr, s.key, "/v1/transactions", ingestBody(t, late...))
	if code != http.StatusOK || ans.Accepted != len(late) {
		t.Fatalf("ingest: %d %+v", code, ans)
	}
	const undecided = `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1 AND decision IS NULL`
	if !poll(waitBound, 200*time.Millisecond, func() bool {
		var n int
		_ = s.super.QueryRow(ctx, undecided, s.ws).Scan(&n)
		return n == len(late)
	}) {
		t.Fatalf("the ingested transactions were not stored within %v", waitBound)
	}

	// Then decided, and a third decided first.
	answers := map[string]decisionAnswer{}
	decide := func(txn map[string]any) decisionAnswer {
		t.Helper()
		body, _ := json.Marshal(txn)
		code, a, err := postDecision("http://"+s.addr, s.key, body)
		if err != nil || code != http.StatusOK || a.Degraded || a.Repeated {
			t.Fatalf("deciding %s: %d %v %+v", txn["external_id"], code, err, a)
		}
		answers[a.ExternalID] = a
		return a
	}
	if a := decide(late[0]); a.Decision != "decline" {
		t.Errorf("late-0 decided %s, want decline", a.Decision)
	}
	if a := decide(late[1]); a.Decision != "approve" {
		t.Errorf("late-1 decided %s, want approve", a.Decision)
	}
	early := decisionTxn("early", 2, now)
	decide(early)

	s.waitStored(t, len(answers), waitBound)
	// The decisions rows and the rows' decisions commit together: once the
	// decisions are stored, the rows carry them.
	if bad := s.checkStoredOnce(t, answers, nil); len(bad) > 0 {
		t.Errorf("a transaction ingested first and decided later does not carry its decision:\n%s", strings.Join(bad, "\n"))
	}
	for ext, a := range answers {
		var score float64
		var decidedAt *time.Time
		if err := s.super.QueryRow(ctx, `SELECT coalesce(decision_score, -1)::float8, decided_at FROM speculapro.transactions WHERE workspace_id = $1 AND external_id = $2`,
			s.ws, ext).Scan(&score, &decidedAt); err != nil {
			t.Fatal(err)
		}
		if score != a.Score || decidedAt == nil {
			t.Errorf("%s: stored score %v decided_at %v, want score %v and a time", ext, score, decidedAt, a.Score)
		}
	}

	// The one decided first, sent to the ingest API: stored already, by the
	// same content (the decision is not content), so duplicate; with other
	// content, conflict; its decision stays.
	changed := decisionTxn("early", 2, now)
	changed["amount"] = "1.00"
	code, ans = ingestPost(t, client, "http://"+ingestAddr, s.key, "/v1/transactions", ingestBody(t, early))
	if code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].Status != "duplicate" || ans.Results[0].ID != answers["early-000002"].ID {
		t.Errorf("the decided transaction sent to the ingest API: %d %+v, want duplicate with id %s", code, ans, answers["early-000002"].ID)
	}
	code, ans = ingestPost(t, client, "http://"+ingestAddr, s.key, "/v1/transactions", ingestBody(t, changed))
	if code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].Status != "conflict" {
		t.Errorf("the decided transaction sent to the ingest API with another amount: %d %+v, want conflict", code, ans)
	}
	time.Sleep(2 * time.Second) // anything sent by mistake would be stored by now
	if bad := s.checkStoredOnce(t, answers, nil); len(bad) > 0 {
		t.Errorf("after the ingest API's resends:\n%s", strings.Join(bad, "\n"))
	}
	var decided int
	if err := s.super.QueryRow(ctx, `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1 AND decision IS NOT NULL`, s.ws).Scan(&decided); err != nil {
		t.Fatal(err)
	}
	if decided != len(answers) {
		t.Errorf("%d decided transactions stored, want %d", decided, len(answers))
	}
}
