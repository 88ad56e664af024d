package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// caseStack is the ingest, decision and case APIs in one process, as
// `speculapro dev` runs them, on a database of the test's own with two
// workspaces: a's with cases, alerts and hits, b's with one case of its own.
type caseStack struct {
	db                   *dbtest.DB
	sys                  *pgx.Conn
	proc                 *binProcess
	ingest, decide, base string
	wsA, wsB             event.UUID
	// keyA: a's first key (ingest and decide, as every key before scopes);
	// casesA, casesB: keys with the cases scope alone.
	keyA, casesA, casesB string
	hookAll, hookAlerts  event.UUID // a's webhook endpoints: every event type, alert.created only
}

func newCaseStack(t *testing.T) *caseStack {
	t.Helper()
	s := &caseStack{db: dbtest.New(t)}
	s.sys = s.db.Connect(t, s.db.SystemURL)
	workspace := func(name string) (event.UUID, string, string) {
		created := ingestCLI(t, s.db.AppURL, "workspace", "create", "--name", name)
		ws, err := event.ParseUUID(created["workspace_id"])
		if err != nil {
			t.Fatalf("workspace create printed %v", created)
		}
		k := ingestCLI(t, s.db.AppURL, "apikey", "create", "--workspace", ws.String(), "--name", "analysts", "--scopes", "cases")
		if k["scopes"] != "cases" {
			t.Fatalf("apikey create --scopes cases printed %v", k)
		}
		return ws, created["api_key"], k["api_key"]
	}
	s.wsA, s.keyA, s.casesA = workspace("case e2e a")
	s.wsB, _, s.casesB = workspace("case e2e b")
	seedCases(t, s.sys, s.wsA, 3, 2)
	seedCases(t, s.sys, s.wsB, 1, 1)
	for i, types := range []string{`{}`, `{alert.created}`} {
		var id event.UUID
		if err := s.sys.QueryRow(context.Background(), `INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted, event_types)
			VALUES ($1, $2, '\x00', $3) RETURNING id`, s.wsA, fmt.Sprintf("https://example.invalid/hook-%d", i), types).Scan(&id); err != nil {
			t.Fatalf("inserting a webhook endpoint: %v", err)
		}
		if i == 0 {
			s.hookAll = id
		} else {
			s.hookAlerts = id
		}
	}
	unique := uniqueName(t, "case")
	enc, fp := identity.DevKeys()
	s.ingest, s.decide, s.base = testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	env := map[string]string{
		"SP_DB_URL": s.db.AppURL, "SP_DB_SYSTEM_URL": s.db.SystemURL,
		"SP_KAFKA_BROKERS": strings.Join(testenv.KafkaBrokers(t), ","), "SP_KAFKA_TOPIC_PREFIX": unique + ".",
		"SP_REDIS_URL": testenv.RedisURL(t), "SP_REDIS_KEY_PREFIX": unique + ":", "SP_DECISION_SPOOL_PREFIX": unique + ":",
		"SP_INGEST_ADDR": s.ingest, "SP_DECISION_ADDR": s.decide, "SP_CASE_ADDR": s.base,
		"SP_ENCRYPTION_KEY": enc, "SP_FINGERPRINT_KEY": fp,
	}
	s.proc = newBinProcess(t).named("apis").start(t, env, "streams", "-o", "config/observability.yaml", "pipelines/ingest.yaml", "pipelines/decision.yaml", "pipelines/cases.yaml")
	for _, addr := range []string{s.ingest, s.decide, s.base} {
		waitUntil(t, waitBound, "the APIs to listen", func() error {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		})
	}
	return s
}

// cases lists workspace ws's case IDs, newest first, as the system role sees them.
func (s *caseStack) cases(t *testing.T, ws event.UUID) []event.UUID {
	t.Helper()
	rows, err := s.sys.Query(context.Background(), `SELECT id FROM speculapro.cases WHERE workspace_id = $1 ORDER BY opened_at DESC, id DESC`, ws)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[event.UUID])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// caseRow is a case's changeable state as stored.
func (s *caseStack) caseRow(t *testing.T, id event.UUID) string {
	t.Helper()
	return caseRowOf(t, s.sys, id)
}

// Each key is served only where its scopes allow: a cases key cannot send
// transactions or ask decisions, a key made before scopes (ingest, decide)
// cannot read cases; each refusal is 403 naming the missing scope.
func TestCaseAPIKeyScopes(t *testing.T) {
	t.Parallel()
	s := newCaseStack(t)
	for _, c := range []struct {
		what, url, key, method string
		want                   int
	}{
		{"cases key on the ingest API", "http://" + s.ingest + "/v1/transactions", s.casesA, http.MethodPost, http.StatusForbidden},
		{"cases key on the decision API", "http://" + s.decide + "/v1/decisions", s.casesA, http.MethodPost, http.StatusForbidden},
		{"ingest key on the case API", "http://" + s.base + "/v1/cases", s.keyA, http.MethodGet, http.StatusForbidden},
		// Past authentication: the empty body is what is refused.
		{"ingest key on the ingest API", "http://" + s.ingest + "/v1/transactions", s.keyA, http.MethodPost, http.StatusBadRequest},
		{"ingest key on the decision API", "http://" + s.decide + "/v1/decisions", s.keyA, http.MethodPost, http.StatusBadRequest},
		{"cases key on the case API", "http://" + s.base + "/v1/cases", s.casesA, http.MethodGet, http.StatusOK},
		{"no key on the case API", "http://" + s.base + "/v1/cases", "", http.MethodGet, http.StatusUnauthorized},
	} {
		var body any
		if c.method == http.MethodPost {
			body = map[string]any{}
		}
		a := caseCall(t, c.method, c.url, c.key, "", "", body)
		if a.code != c.want {
			t.Errorf("%s: %d %s, want %d", c.what, a.code, a.raw, c.want)
		}
		if c.want == http.StatusForbidden && !strings.Contains(string(a.raw), "scope") {
			t.Errorf("%s: the 403 does not name the scope: %s", c.what, a.raw)
		}
	}
}

// TestCaseAPIEndpoints walks a case through every endpoint with a cases
// key, as an analyst's tool would: list and filter, read one with its
// alerts, hits and feature values, then assign, comment, change status,
// close and reopen, each change with the ETag it saw. A stale If-Match is
// 412 with nothing changed, a missing one 428, bad input 400 naming the
// field, and another workspace's case 404 whatever is asked. Each change is
// one case event naming its actor and one outbox row per subscribed
// endpoint, and the metrics count the close by its disposition.
func TestCaseAPIEndpoints(t *testing.T) {
	t.Parallel()
	s := newCaseStack(t)
	base := "http://" + s.base + "/v1/cases"
	ids := s.cases(t, s.wsA)
	foreign := s.cases(t, s.wsB)[0]
	get := func(url string) caseAnswer { return caseCall(t, http.MethodGet, url, s.casesA, "", "", nil) }

	// Seeded newest first: investigating, open, open (ids in that order).
	list := get(base)
	if list.code != http.StatusOK || len(list.body["cases"].([]any)) != 3 {
		t.Fatalf("GET /v1/cases: %d %s", list.code, list.raw)
	}
	if got := list.body["cases"].([]any)[0].(map[string]any)["id"]; got != ids[0].String() {
		t.Errorf("first case listed %v, want the newest %s", got, ids[0])
	}
	page1 := get(base + "?limit=2")
	cursor, _ := page1.body["next_cursor"].(string)
	page2 := get(base + "?limit=2&cursor=" + cursor)
	if len(page1.body["cases"].([]any)) != 2 || cursor == "" || len(page2.body["cases"].([]any)) != 1 ||
		page2.body["cases"].([]any)[0].(map[string]any)["id"] != ids[2].String() || page2.body["next_cursor"] != nil {
		t.Errorf("pages of 2: %s then %s", page1.raw, page2.raw)
	}
	if open := get(base + "?status=open"); len(open.body["cases"].([]any)) != 2 {
		t.Errorf("status=open: %s", open.raw)
	}
	for _, q := range []string{"status=shut", "limit=201", "customer_id=x", "opened_from=yesterday", "cursor=abc", "colour=red"} {
		a := get(base + "?" + q)
		field, _, _ := strings.Cut(q, "=")
		if a.code != http.StatusBadRequest || !strings.Contains(string(a.raw), `"field":"`+field+`"`) {
			t.Errorf("GET ?%s: %d %s, want 400 naming %s", q, a.code, a.raw, field)
		}
	}

	// One case: its alerts with their hits and the values the rule read.
	one := get(base + "/" + ids[1].String())
	if one.code != http.StatusOK || one.etag != `"1"` {
		t.Fatalf("GET a case: %d ETag %q %s", one.code, one.etag, one.raw)
	}
	alerts := one.body["alerts"].([]any)
	hit, _ := alerts[0].(map[string]any)["rule_hit"].(map[string]any)
	if len(alerts) != 2 || hit == nil || hit["rule"] != "large amount" || hit["rule_version"] != 3.0 ||
		hit["features"].(map[string]any)["features.account.sum_1h"] == nil {
		t.Errorf("GET a case: alerts and hits %s", one.raw)
	}
	for _, url := range []string{base + "/" + foreign.String(), base + "/" + event.UUID{7}.String(), base + "/not-a-case"} {
		if a := get(url); a.code != http.StatusNotFound {
			t.Errorf("GET %s: %d %s, want 404", url, a.code, a.raw)
		}
	}

	id := ids[1].String()
	change := func(path, ifMatch, actor string, body any) caseAnswer {
		return caseCall(t, http.MethodPost, base+"/"+id+path, s.casesA, ifMatch, actor, body)
	}
	steps := []struct {
		path, ifMatch, actor string
		body                 map[string]any
		want                 int
		field                string // the field a 400 names
	}{
		{"/assign", "", "", map[string]any{"actor": "ana", "assignee": "bob"}, http.StatusPreconditionRequired, ""},
		{"/assign", `"1"`, "", map[string]any{"assignee": "bob"}, http.StatusBadRequest, "actor"},
		{"/assign", `"1"`, "", map[string]any{"actor": "ana", "assignee": "bob", "extra": 1}, http.StatusBadRequest, "extra"},
		{"/assign", `"1"`, "", map[string]any{"actor": "ana", "assignee": "bob"}, http.StatusOK, ""},
		// Another analyst, still at version 1: refused, nothing changed.
		{"/assign", `"1"`, "", map[string]any{"actor": "carl", "assignee": "carl"}, http.StatusPreconditionFailed, ""},
		{"/comments", `"2"`, "ana", map[string]any{"comment": " "}, http.StatusBadRequest, "comment"},
		{"/comments", `"2"`, "ana", map[string]any{"comment": "Called the customer."}, http.StatusOK, ""},
		{"/status", `"3"`, "ana", map[string]any{"status": "closed"}, http.StatusBadRequest, "status"},
		{"/status", `"3"`, "ana", map[string]any{"status": "investigating"}, http.StatusOK, ""},
		{"/close", `"4"`, "ana", map[string]any{"disposition": "fraud"}, http.StatusBadRequest, "disposition"},
		{"/close", `"4"`, "ana", map[string]any{"disposition": "true_positive", "note": "Confirmed by the customer."}, http.StatusOK, ""},
		{"/close", `"5"`, "ana", map[string]any{"disposition": "true_positive"}, http.StatusConflict, ""},
		{"/reopen", `"5"`, "ana", map[string]any{"note": "New evidence."}, http.StatusOK, ""},
	}
	for i, st := range steps {
		before := s.caseRow(t, ids[1])
		a := change(st.path, st.ifMatch, st.actor, st.body)
		if a.code != st.want || st.field != "" && !strings.Contains(string(a.raw), `"field":"`+st.field+`"`) {
			t.Fatalf("step %d, POST %s (If-Match %s): %d %s, want %d naming %q", i, st.path, st.ifMatch, a.code, a.raw, st.want, st.field)
		}
		after := s.caseRow(t, ids[1])
		if (a.code == http.StatusOK) == (before == after) {
			t.Errorf("step %d, POST %s answered %d: the case went from %q to %q", i, st.path, a.code, before, after)
		}
	}
	if got, want := s.caseRow(t, ids[1]), "open v6 assignee=bob disposition=- events=5"; got != want {
		t.Errorf("the case after every step: %q, want %q", got, want)
	}

	// Another workspace's case: 404 for every change, and untouched.
	before := s.caseRow(t, foreign)
	for _, path := range []string{"/assign", "/comments", "/status", "/close", "/reopen"} {
		a := caseCall(t, http.MethodPost, base+"/"+foreign.String()+path, s.casesA, `"1"`, "ana",
			map[string]any{"assignee": "x", "comment": "x", "status": "investigating", "disposition": "inconclusive"})
		if a.code != http.StatusNotFound && a.code != http.StatusBadRequest {
			t.Errorf("POST %s on another workspace's case: %d %s, want 404", path, a.code, a.raw)
		}
	}
	if a := caseCall(t, http.MethodPost, base+"/"+foreign.String()+"/assign", s.casesA, `"1"`, "ana", map[string]any{"assignee": "x"}); a.code != http.StatusNotFound {
		t.Errorf("assigning another workspace's case: %d %s, want 404", a.code, a.raw)
	}
	if after := s.caseRow(t, foreign); after != before {
		t.Errorf("another workspace's case changed from %q to %q", before, after)
	}

	// The timeline and the outbox: one event per change, named by its actor;
	// the endpoint for every event type got one delivery each, the
	// alert.created one none.
	var timeline string
	if err := s.sys.QueryRow(context.Background(), `SELECT string_agg(kind || ':' || actor, ' ' ORDER BY created_at, id)
		FROM speculapro.case_events WHERE case_id = $1`, ids[1]).Scan(&timeline); err != nil {
		t.Fatal(err)
	}
	if want := "assigned:ana commented:ana status_changed:ana closed:ana reopened:ana"; timeline != want {
		t.Errorf("case events: %q, want %q", timeline, want)
	}
	var deliveries string
	if err := s.sys.QueryRow(context.Background(), `SELECT coalesce(string_agg(d.event_type || '@' || (d.endpoint_id = $2)::text, ' ' ORDER BY d.created_at, d.id), '')
		FROM speculapro.webhook_deliveries d WHERE d.workspace_id = $1 AND d.payload->'case'->>'id' = $3`, s.wsA, s.hookAll, id).Scan(&deliveries); err != nil {
		t.Fatal(err)
	}
	if want := "case.assigned@true case.commented@true case.status_changed@true case.closed@true case.reopened@true"; deliveries != want {
		t.Errorf("webhook deliveries: %q, want %q", deliveries, want)
	}
	waitUntil(t, waitBound, "the closed counter", func() error {
		m, err := s.proc.scrape()
		if err != nil {
			return err
		}
		if n := metricSum(m, "speculapro_cases_closed_total", `disposition="true_positive"`); n != 1 {
			return fmt.Errorf("speculapro_cases_closed_total{disposition=true_positive} = %v, want 1", n)
		}
		return nil
	})
}

// Analysts changing one case at the same moment from the same version: one
// change is made, every other is refused 412, and the case holds exactly
// the one change and its one event.
func TestCaseAPIConcurrentChangesOneWins(t *testing.T) {
	t.Parallel()
	s := newCaseStack(t)
	id := s.cases(t, s.wsA)[2]
	url := "http://" + s.base + "/v1/cases/" + id.String() + "/assign"
	const analysts = 8
	codes := make(chan int, analysts)
	var wg sync.WaitGroup
	for i := range analysts {
		wg.Add(1)
		// Each request's goroutine ends with its answer (the client's timeout bounds it).
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("analyst-%d", i)
			a, err := caseTry(http.MethodPost, url, s.casesA, `"1"`, who, map[string]any{"assignee": who})
			if err != nil {
				t.Error(err)
			}
			codes <- a.code
		}()
	}
	wg.Wait()
	close(codes)
	counts := map[int]int{}
	for c := range codes {
		counts[c]++
	}
	if counts[http.StatusOK] != 1 || counts[http.StatusPreconditionFailed] != analysts-1 {
		t.Errorf("answers %v, want one 200 and %d 412", counts, analysts-1)
	}
	if row := s.caseRow(t, id); !strings.HasPrefix(row, "open v2 assignee=analyst-") || !strings.HasSuffix(row, " events=1") {
		t.Errorf("the case after the race: %q, want version 2, one assignee, one event", row)
	}
}
