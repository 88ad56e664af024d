package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/devtools/pgwritetest"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/webhook"
)

// lifecycleRules: two live rules that both fire on a large payment out to a
// new payee, each reading a feature (the values a case shows for its
// alerts), and a critical shadow rule that fires on every payment out: were
// a shadow hit ever to reach a case, the case's priority would show it.
const lifecycleRules = `rules:
  - name: lc_large_payment
    description: Large payment out
    severity: high
    expression: event.direction == "out" && event.amount >= 1000 && features.account.new_counterparty == true
  - name: lc_payment_out
    severity: low
    expression: event.direction == "out" && event.amount >= 100 && (features.account.out_count_1h | 0) >= 1
  - name: lc_every_payment_shadow
    mode: shadow
    severity: critical
    expression: event.direction == "out"
`

// lifecycleTxns: cust-1 pays 1,500 and 200 out of acc-1 (three alerts);
// cust-2 pays 2,500 out of acc-2 (two alerts) and receives 50 (none).
var lifecycleTxns = []struct{ id, customer, account, amount, direction string }{
	{"lc-1", "cust-1", "acc-1", "1500.00", "out"},
	{"lc-2", "cust-1", "acc-1", "200.00", "out"},
	{"lc-3", "cust-2", "acc-2", "2500.00", "out"},
	{"lc-4", "cust-2", "acc-2", "50.00", "in"},
}

// The case webhook subscriptions of the lifecycle: the case desk's endpoint
// takes what the stream announces and two of the API's changes (not
// comments nor reopenings), the alert feed alert.created alone.
const (
	lifecycleDeskEvents = "case.opened,case.alert_attached,case.assigned,case.closed"
	lifecycleFeedEvents = "alert.created"
)

// lifecycleStack is every role in one process, as `speculapro dev` runs
// them (ingest, persist, stream, cases, worker), on the test's own
// database, topics, groups and Redis prefix, with a loopback receiver for
// the webhooks.
type lifecycleStack struct {
	db                     *dbtest.DB
	sys                    *pgx.Conn // superuser, for counting
	ws                     event.UUID
	ingestKey, casesKey    string
	ingest, cases          string // base URLs
	proc                   *binProcess
	rcv                    *receiver
	deskSecret, feedSecret string
}

func newLifecycleStack(t *testing.T) *lifecycleStack {
	t.Helper()
	s := &lifecycleStack{db: dbtest.New(t), rcv: newReceiver(t)}
	s.sys = s.db.Connect(t, s.db.SuperuserURL)
	created := ingestCLI(t, s.db.AppURL, "workspace", "create", "--name", "case lifecycle")
	ws, err := event.ParseUUID(created["workspace_id"])
	if err != nil {
		t.Fatalf("workspace create printed %v", created)
	}
	s.ws = ws
	key := func(scope string) string {
		k := ingestCLI(t, s.db.AppURL, "apikey", "create", "--workspace", ws.String(), "--name", scope, "--scopes", scope)
		if k["scopes"] != scope || !strings.HasPrefix(k["api_key"], "spk_") {
			t.Fatalf("apikey create --scopes %s printed %v", scope, k)
		}
		return k["api_key"]
	}
	s.ingestKey, s.casesKey = key("ingest"), key("cases")
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(lifecycleRules), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runBin(t, map[string]string{"SP_DB_URL": s.db.AppURL}, "rules", "apply", rulesFile, "--workspace", ws.String()); code != 0 {
		t.Fatalf("rules apply: exit %d\n%s%s", code, out, errOut)
	}
	enc, fp := identity.DevKeys()
	cliEnv := map[string]string{"SP_DB_URL": s.db.AppURL, "SP_ENCRYPTION_KEY": enc, "SP_WEBHOOK_ALLOW_INSECURE": "true"}
	hook := func(path, events string) string {
		out, errOut, code := runBin(t, cliEnv, "webhook", "add", "--workspace", ws.String(), "--url", s.rcv.url(path), "--events", events)
		for _, line := range strings.Split(out, "\n") {
			if secret, ok := strings.CutPrefix(line, "secret="); ok && code == 0 {
				return secret
			}
		}
		t.Fatalf("webhook add %s: exit %d\n%s%s", path, code, out, errOut)
		return ""
	}
	s.deskSecret, s.feedSecret = hook("/desk", lifecycleDeskEvents), hook("/feed", lifecycleFeedEvents)

	k := newTestKafka(t)
	unique := uniqueName(t, "lifecycle")
	k.createAll(t, unique+".", 3)
	k.own(nil, []string{unique + "-persist", unique + "-stream"})
	redisURL := testenv.RedisURL(t)
	t.Cleanup(func() { deleteRedisKeys(t, redisURL, unique+":") })
	ingestAddr, casesAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	s.ingest, s.cases = "http://"+ingestAddr, "http://"+casesAddr
	env := map[string]string{
		"SP_DB_URL": s.db.AppURL, "SP_DB_SYSTEM_URL": s.db.SystemURL,
		"SP_KAFKA_BROKERS": strings.Join(k.brokers, ","), "SP_KAFKA_TOPIC_PREFIX": unique + ".",
		"SP_PERSIST_GROUP": unique + "-persist", "SP_STREAM_GROUP": unique + "-stream",
		"SP_REDIS_URL": redisURL, "SP_REDIS_KEY_PREFIX": unique + ":", "SP_INGEST_IDEMPOTENCY_TTL": "10m",
		"SP_INGEST_ADDR": ingestAddr, "SP_CASE_ADDR": casesAddr,
		"SP_ENCRYPTION_KEY": enc, "SP_FINGERPRINT_KEY": fp,
		"SP_WEBHOOK_ALLOW_INSECURE": "true", "SP_WEBHOOK_BACKOFF_INITIAL": "1s", "SP_WEBHOOK_BACKOFF_MAX": "2s",
	}
	s.proc = newBinProcess(t).named("all roles").start(t, env, "streams", "-o", "config/observability.yaml",
		"pipelines/ingest.yaml", "pipelines/persist.yaml", "pipelines/stream.yaml", "pipelines/cases.yaml", "pipelines/worker.yaml")
	ingestWaitReady(t, s.proc, s.ingest)
	ingestWaitReady(t, s.proc, s.cases)
	return s
}

// count runs a count query as the superuser.
func (s *lifecycleStack) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.sys.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// call sends one request to the case API with the cases key.
func (s *lifecycleStack) call(t *testing.T, method, path, ifMatch, actor string, body any) caseAnswer {
	t.Helper()
	return caseCall(t, method, s.cases+"/v1/cases"+path, s.casesKey, ifMatch, actor, body)
}

// A case's whole life through the real binary, every role in one process:
// transactions sent to the ingest API with an ingest key raise alerts in
// the real stream, which opens one case per customer; an analyst's tool,
// with a cases key, lists them, reads one with its alerts, hits and feature
// values, assigns, comments, closes one true positive and one false
// positive, reopens and closes again; a stale If-Match changes nothing.
// The worker delivers every case event to the endpoint subscribed to it,
// signed, once each, in one body shape whoever wrote the event; `rules
// stats` then shows each rule's precision from those outcomes, the shadow
// rule's hits reach no case, and /metrics counts the closes by disposition.
func TestCaseLifecycleEndToEnd(t *testing.T) {
	t.Parallel()
	s := newLifecycleStack(t)

	items := make([]map[string]any, 0, len(lifecycleTxns))
	for _, x := range lifecycleTxns {
		items = append(items, map[string]any{"external_id": x.id, "occurred_at": time.Now().UTC().Format(time.RFC3339Nano),
			"customer_external_id": x.customer, "account_external_id": x.account, "amount": x.amount, "currency": "EUR",
			"direction": x.direction, "counterparty": map[string]any{"name": "Payee of " + x.id}})
	}
	client := &http.Client{Timeout: 30 * time.Second}
	if code, ans := ingestPost(t, client, s.ingest, s.ingestKey, "/v1/transactions", ingestBody(t, items...)); code != http.StatusOK || ans.Accepted != len(items) {
		t.Fatalf("ingest: %d %+v", code, ans)
	}
	if a := caseCall(t, http.MethodGet, s.cases+"/v1/cases", s.ingestKey, "", "", nil); a.code != http.StatusForbidden {
		t.Errorf("the ingest key on the case API: %d %s, want 403", a.code, a.raw)
	}
	const alerts, shadowHits = 5, 3
	waitUntil(t, waitBound, "the stream's alerts and evaluations", func() error {
		got := fmt.Sprintf("%d alerts, %d shadow hits, %d evaluations",
			s.count(t, `SELECT count(*) FROM speculapro.alerts`), s.count(t, `SELECT count(*) FROM speculapro.rule_hits WHERE shadow`),
			s.count(t, `SELECT coalesce(sum(events), 0)::int FROM speculapro.rule_evaluations`))
		if want := fmt.Sprintf("%d alerts, %d shadow hits, %d evaluations", alerts, shadowHits, 3*len(lifecycleTxns)); got != want {
			return fmt.Errorf("%s, want %s", got, want)
		}
		return nil
	})
	// What the stream wrote, before any analyst: every alert in exactly one
	// case, one opening per case, one attachment per alert, each queued once
	// for the desk.
	for _, f := range pgwritetest.CaseFaults(t, s.sys) {
		t.Error(f)
	}

	c1, c2 := lifecycleCases(t, s)
	lifecycleWork(t, s, c1, c2)
	lifecycleDeliveries(t, s)
	lifecycleStats(t, s)

	if n := s.count(t, `SELECT count(*) FROM speculapro.alerts a JOIN speculapro.rules r ON r.id = a.rule_id WHERE r.mode = 'shadow'`) +
		s.count(t, `SELECT count(*) FROM speculapro.case_events e JOIN speculapro.rules r ON r.id::text = e.body ->> 'rule_id' WHERE r.mode = 'shadow'`); n != 0 {
		t.Errorf("%d alerts or case events of the shadow rule", n)
	}
	waitUntil(t, waitBound, "the closes counted by disposition", func() error {
		m, err := s.proc.scrape()
		if err != nil {
			return err
		}
		tp, fp := metricSum(m, "speculapro_cases_closed_total", `disposition="true_positive"`), metricSum(m, "speculapro_cases_closed_total", `disposition="false_positive"`)
		if tp != 1 || fp != 2 {
			return fmt.Errorf("speculapro_cases_closed_total: true_positive %v, false_positive %v; want 1 and 2\n%s", tp, fp, metricLines(m, "speculapro_cases_closed_total"))
		}
		return nil
	})
	if code := s.proc.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// lifecycleCases lists the cases the stream opened (one per customer, cust-1's
// with three alerts, cust-2's with two, both high: the shadow rule's
// critical hits are in neither) and reads cust-1's with its alerts, the hit
// behind each with the feature values its rule read (the account's payments
// out in the hour count the one that fired), and its timeline. It returns
// cust-1's and cust-2's cases with the ETags read.
func lifecycleCases(t *testing.T, s *lifecycleStack) (c1, c2 lifecycleCase) {
	t.Helper()
	list := s.call(t, http.MethodGet, "?status=open", "", "", nil)
	var page struct {
		Cases []struct {
			ID         string `json:"id"`
			CustomerID string `json:"customer_id"`
			Priority   string `json:"priority"`
			AlertCount int    `json:"alert_count"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(list.raw, &page); list.code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/cases: %d %s", list.code, list.raw)
	}
	got := map[string]string{}
	ids := map[string]string{}
	for _, c := range page.Cases {
		for _, cust := range []string{"cust-1", "cust-2"} {
			if c.CustomerID == event.CustomerID(s.ws, cust).String() {
				got[cust] = fmt.Sprintf("%s %d", c.Priority, c.AlertCount)
				ids[cust] = c.ID
			}
		}
	}
	if want := map[string]string{"cust-1": "high 3", "cust-2": "high 2"}; len(page.Cases) != 2 || !maps.Equal(got, want) {
		t.Fatalf("open cases %v (%d listed), want %v:\n%s", got, len(page.Cases), want, list.raw)
	}

	one := s.call(t, http.MethodGet, "/"+ids["cust-1"], "", "", nil)
	var c struct {
		Alerts []struct {
			ID      string `json:"id"`
			RuleHit struct {
				Rule     string         `json:"rule"`
				Features map[string]any `json:"features"`
			} `json:"rule_hit"`
		} `json:"alerts"`
		Events []struct{ Kind, Actor string } `json:"events"`
	}
	if err := json.Unmarshal(one.raw, &c); one.code != http.StatusOK || err != nil || one.etag == "" {
		t.Fatalf("GET cust-1's case: %d ETag %q %s", one.code, one.etag, one.raw)
	}
	var hits, timeline []string
	for _, a := range c.Alerts {
		hits = append(hits, fmt.Sprintf("%s %v", a.RuleHit.Rule, a.RuleHit.Features))
	}
	for _, e := range c.Events {
		timeline = append(timeline, e.Kind+":"+e.Actor)
	}
	slices.Sort(hits)
	slices.Sort(timeline)
	wantHits := []string{"lc_large_payment map[features.account.new_counterparty:true]",
		"lc_payment_out map[features.account.out_count_1h:1]", "lc_payment_out map[features.account.out_count_1h:2]"}
	if !slices.Equal(hits, wantHits) ||
		fmt.Sprint(timeline) != "[alert_attached:stream alert_attached:stream alert_attached:stream opened:stream]" {
		t.Errorf("cust-1's case: hits %q (want %q), timeline %v\n%s", hits, wantHits, timeline, one.raw)
	}
	two := s.call(t, http.MethodGet, "/"+ids["cust-2"], "", "", nil)
	if two.code != http.StatusOK || two.etag == "" {
		t.Fatalf("GET cust-2's case: %d ETag %q %s", two.code, two.etag, two.raw)
	}
	return lifecycleCase{ids["cust-1"], one.etag}, lifecycleCase{ids["cust-2"], two.etag}
}

// lifecycleCase is a case as the analysts' tool read it: its ID and ETag.
type lifecycleCase struct{ id, etag string }

// version is the case's version after n more changes.
func (c lifecycleCase) version(t *testing.T, n int) string {
	t.Helper()
	v, err := strconv.Atoi(strings.Trim(c.etag, `"`))
	if err != nil {
		t.Fatalf("ETag %q", c.etag)
	}
	return "v" + strconv.Itoa(v+n)
}

// lifecycleWork is the analysts' work: Ana assigns cust-1's case to
// herself, Ben's assignment from the same version is refused 412 with
// nothing changed, Ana comments and closes it true positive; Ben assigns
// cust-2's to himself, closes it false positive, reopens it and closes it
// false positive again.
func lifecycleWork(t *testing.T, s *lifecycleStack, c1, c2 lifecycleCase) {
	t.Helper()
	change := func(c lifecycleCase, path, ifMatch, actor string, body map[string]any) string {
		t.Helper()
		a := s.call(t, http.MethodPost, "/"+c.id+path, ifMatch, actor, body)
		if a.code != http.StatusOK {
			t.Fatalf("POST %s (If-Match %s): %d %s", path, ifMatch, a.code, a.raw)
		}
		return a.etag
	}
	etag := change(c1, "/assign", c1.etag, "", map[string]any{"actor": "ana.lopez", "assignee": "ana.lopez"})

	id1, _ := event.ParseUUID(c1.id)
	before := caseRowOf(t, s.sys, id1)
	deliveries := s.count(t, `SELECT count(*) FROM speculapro.webhook_deliveries`)
	if a := s.call(t, http.MethodPost, "/"+c1.id+"/assign", c1.etag, "ben.okafor", map[string]any{"assignee": "ben.okafor"}); a.code != http.StatusPreconditionFailed {
		t.Fatalf("a stale If-Match: %d %s, want 412", a.code, a.raw)
	}
	if after := caseRowOf(t, s.sys, id1); after != before || s.count(t, `SELECT count(*) FROM speculapro.webhook_deliveries`) != deliveries {
		t.Errorf("the refused change changed the case from %q to %q, or queued a delivery", before, after)
	}
	etag = change(c1, "/comments", etag, "ana.lopez", map[string]any{"comment": "Called the customer: both payments are theirs, to a new payee."})
	change(c1, "/close", etag, "ana.lopez", map[string]any{"disposition": "true_positive", "note": "Account takeover confirmed."})

	etag = change(c2, "/assign", c2.etag, "ben.okafor", map[string]any{"assignee": "ben.okafor"})
	etag = change(c2, "/close", etag, "ben.okafor", map[string]any{"disposition": "false_positive", "note": "Supplier invoice."})
	etag = change(c2, "/reopen", etag, "ben.okafor", map[string]any{"note": "The invoice was forged."})
	change(c2, "/close", etag, "ben.okafor", map[string]any{"disposition": "false_positive", "note": "Invoice confirmed with the supplier."})

	id2, _ := event.ParseUUID(c2.id)
	got := caseRowOf(t, s.sys, id1) + " | " + caseRowOf(t, s.sys, id2)
	// cust-1's timeline: opened, three alerts attached, assigned, commented,
	// closed; cust-2's: opened, two attached, assigned, closed, reopened,
	// closed.
	want := "closed " + c1.version(t, 3) + " assignee=ana.lopez disposition=true_positive events=7 | closed " +
		c2.version(t, 4) + " assignee=ben.okafor disposition=false_positive events=7"
	if got != want {
		t.Errorf("the cases after the work:\n %s\nwant\n %s", got, want)
	}
}

// lifecycleDeliveries waits for the worker, then counts what the receiver
// got: the desk each case event of a kind it subscribed to exactly once, the
// feed each alert once; every signature verifies; and every case.* body, the
// stream's and the API's alike, has the one shape: the same case keys, an
// event {kind, actor, body} matching the case event stored.
func lifecycleDeliveries(t *testing.T, s *lifecycleStack) {
	t.Helper()
	waitUntil(t, waitBound, "every delivery delivered", func() error {
		if n := s.count(t, `SELECT count(*) FROM speculapro.webhook_deliveries WHERE status <> 'delivered'`); n > 0 {
			return fmt.Errorf("%d deliveries not delivered", n)
		}
		return nil
	})
	rows, err := s.sys.Query(context.Background(), `SELECT id::text, kind, actor, body FROM speculapro.case_events
 WHERE 'case.' || kind = ANY (string_to_array($1, ','))`, lifecycleDeskEvents)
	if err != nil {
		t.Fatal(err)
	}
	type stored struct {
		kind, actor string
		body        map[string]any
	}
	events := map[string]stored{}
	kinds := map[string]int{}
	for rows.Next() {
		var id string
		var e stored
		if err := rows.Scan(&id, &e.kind, &e.actor, &e.body); err != nil {
			t.Fatal(err)
		}
		events[id] = e
		kinds[e.kind]++
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if want := map[string]int{"opened": 2, "alert_attached": 5, "assigned": 2, "closed": 3}; !maps.Equal(kinds, want) {
		t.Errorf("case events %v, want %v", kinds, want)
	}

	now := time.Now()
	desk := s.rcv.requests("/desk")
	seen := map[string]int{}
	// The keys of the bodies the stream wrote and of those the API wrote,
	// by path (type, case.id, event.kind, …): one set for both.
	keysBy := map[bool]map[string]bool{true: {}, false: {}}
	for _, r := range desk {
		seen[r.key]++
		if err := webhook.Verify(r.header, r.body, s.deskSecret, now, 10*time.Minute); err != nil {
			t.Errorf("desk delivery %s does not verify: %v", r.key, err)
		}
		if err := pgwritetest.CaseBodyFault(r.body); err != nil {
			t.Errorf("desk delivery %s (%s) is not the one body of a case event: %v\n%s", r.key, r.event, err, r.body)
		}
		var body struct {
			Type  string         `json:"type"`
			ID    string         `json:"id"`
			Case  map[string]any `json:"case"`
			Event struct {
				Kind  string         `json:"kind"`
				Actor string         `json:"actor"`
				Body  map[string]any `json:"body"`
			} `json:"event"`
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(r.body, &body) != nil || json.Unmarshal(r.body, &top) != nil {
			t.Fatalf("desk delivery %s: %s", r.key, r.body)
		}
		e, ok := events[body.ID]
		if !ok || r.key != body.ID || r.event != body.Type || body.Type != "case."+e.kind ||
			body.Event.Kind != e.kind || body.Event.Actor != e.actor || fmt.Sprint(body.Event.Body) != fmt.Sprint(e.body) {
			t.Errorf("desk delivery %s (%s, stored as %+v):\n%s", r.key, r.event, e, r.body)
		}
		byStream := body.Event.Actor == "stream"
		for k := range top {
			keysBy[byStream][k] = true
		}
		for k := range body.Case {
			keysBy[byStream]["case."+k] = true
		}
		for _, k := range []string{"kind", "actor", "body"} {
			keysBy[byStream]["event."+k] = true
		}
		if body.Type != "case.alert_attached" {
			continue
		}
		if n := s.count(t, `SELECT count(*) FROM speculapro.alerts WHERE id::text = $1 AND case_id::text = $2`,
			body.Event.Body["alert_id"], body.Case["id"]); n != 1 {
			t.Errorf("case.alert_attached %s: event.body.alert_id %v is not an alert of case %v", r.key, body.Event.Body["alert_id"], body.Case["id"])
		}
	}
	if stream, api := slices.Sorted(maps.Keys(keysBy[true])), slices.Sorted(maps.Keys(keysBy[false])); len(stream) == 0 || !slices.Equal(stream, api) {
		t.Errorf("the stream's case bodies have the keys %v, the API's %v: want one set", stream, api)
	}
	for id, e := range events {
		if seen[id] != 1 {
			t.Errorf("case event %s (%s) reached the desk %d times, want once", id, e.kind, seen[id])
		}
	}
	if len(desk) != len(events) {
		t.Errorf("the desk got %d requests for %d case events", len(desk), len(events))
	}

	feed := s.rcv.requests("/feed")
	alertIDs := map[string]int{}
	for _, r := range feed {
		if err := webhook.Verify(r.header, r.body, s.feedSecret, now, 10*time.Minute); err != nil || r.event != "alert.created" {
			t.Errorf("feed delivery %s (%s) does not verify: %v", r.key, r.event, err)
		}
		alertIDs[r.key]++
	}
	if n := s.count(t, `SELECT count(*) FROM speculapro.alerts`); len(feed) != n || len(alertIDs) != n {
		t.Errorf("the feed got %d requests for %d alerts (%d distinct)", len(feed), n, len(alertIDs))
	}
}

// lifecycleStats runs `rules stats` as a user would and reads each rule's
// outcomes and precision: lc_large_payment fired once in each case (one true
// positive, one false: 0.5), lc_payment_out twice in cust-1's and once in
// cust-2's (2 of 3), the shadow rule hit three payments, alerted none, and
// has no precision.
func lifecycleStats(t *testing.T, s *lifecycleStack) {
	t.Helper()
	out, errOut, code := runBin(t, map[string]string{"SP_DB_URL": s.db.AppURL}, "rules", "stats", "--workspace", s.ws.String(), "--format", "json")
	if code != 0 {
		t.Fatalf("rules stats: exit %d\n%s%s", code, out, errOut)
	}
	var raw struct {
		Rules []map[string]any `json:"rules"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("rules stats: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, r := range raw.Rules {
		precision := "null"
		if p, ok := r["precision"].(float64); ok {
			precision = fmt.Sprintf("%.3f", p)
		}
		got[fmt.Sprint(r["rule"])] = fmt.Sprintf("%v evaluated=%v hits=%v alerts=%v tp=%v fp=%v inconclusive=%v precision=%s",
			r["mode"], r["events_evaluated"], r["hits"], r["alerts"], r["true_positives"], r["false_positives"], r["inconclusive"], precision)
	}
	want := map[string]string{
		"lc_large_payment":        "live evaluated=4 hits=2 alerts=2 tp=1 fp=1 inconclusive=0 precision=0.500",
		"lc_payment_out":          "live evaluated=4 hits=3 alerts=3 tp=2 fp=1 inconclusive=0 precision=0.667",
		"lc_every_payment_shadow": "shadow evaluated=4 hits=3 alerts=0 tp=0 fp=0 inconclusive=0 precision=null",
	}
	if !maps.Equal(got, want) {
		t.Errorf("rules stats:\n%v\nwant\n%v\n%s", got, want, out)
	}
}
