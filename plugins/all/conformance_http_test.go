package all_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/identity"
)

// The HTTP inputs, ingest_api and decision_api, answer for their
// services: a lost PostgreSQL, Redis or Kafka is never a lost connection
// of the input (Read never returns service.ErrNotConnected, so the engine
// never tears the server down), it is the answer the API documents for
// that outage (docs/ingest-api.md, "When Kafka, Redis or PostgreSQL is
// down"; docs/decision-api.md, "Timeouts and degraded answers") and its
// /readyz naming the service. So their row connects, serves a request,
// loses each service in turn and gets the documented answer, gets normal
// answers again once the service is back, and closes within the bound.

// httpRow is one HTTP input and how to drive it.
type httpRow struct {
	name    string
	prepare func(t *testing.T) httpSetup
}

// httpSetup is a prepared HTTP input: its YAML, where it serves, a request
// and what a normal answer to it is, and the services it can lose.
type httpSetup struct {
	conf string
	base string // http://address
	key  string // an API key of the workspace
	// request is request n: method, path and body.
	request func(n int) (method, path, body string)
	// normal checks an answer given with every service up.
	normal answerCheck
	deps   []httpDependency
}

// httpDependency is one service the input uses and its documented outage.
type httpDependency struct {
	name          string
	lose, restore func()
	// readyWhenLost is /readyz's status code and the field naming the
	// service, with the service lost.
	readyWhenLost  int
	readyField     string
	readyFieldLost string
	// degraded checks the answer to a request with the service lost.
	degraded answerCheck
}

// answerCheck checks an API's answer: pipelined when the request's message
// was handed to the pipeline, an error when the answer is not the one
// expected.
type answerCheck func(code int, answer map[string]any) (pipelined bool, err error)

var httpConformanceRows = []httpRow{
	{name: "ingest_api", prepare: prepareIngestAPI},
	{name: "decision_api", prepare: prepareDecisionAPI},
}

// TestConformanceHTTPInputs runs ingest_api and decision_api through the
// contract of an input that answers for its services.
func TestConformanceHTTPInputs(t *testing.T) {
	for _, row := range httpConformanceRows {
		t.Run(row.name, func(t *testing.T) { runHTTPConformance(t, row) })
	}
}

func runHTTPConformance(t *testing.T, row httpRow) {
	set := row.prepare(t)
	s := startStream(t, set.conf, true)
	select {
	case err := <-s.done:
		t.Fatalf("the stream ended at start: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	s.counts.waitFor(t, "input"+metricConnUp, 1, "Connect")
	n := 0
	// ask sends the next request and checks its answer; a message handed
	// to the pipeline is read from it.
	ask := func(why string, check answerCheck) error {
		t.Helper()
		n++
		method, path, body := set.request(n)
		code, answer := callAPI(t, set.base, method, path, set.key, body)
		pipelined, err := check(code, answer)
		if pipelined {
			s.readOne(t, why)
		}
		return err
	}
	waitReady(t, set.base, "with every service up")
	if err := ask("with every service up", set.normal); err != nil {
		t.Fatalf("with every service up: %v", err)
	}
	for _, dep := range set.deps {
		dep.lose()
		waitReadyAnswer(t, set.base, dep.readyWhenLost, dep.readyField, dep.readyFieldLost, dep.name+" lost")
		if err := ask(dep.name+" lost", dep.degraded); err != nil {
			t.Fatalf("%s lost: %v", dep.name, err)
		}
		dep.restore()
		waitReady(t, set.base, dep.name+" back")
		// A client that leaves a failed service alone for a while (the
		// decision API's Redis breaker) answers normally within stepWait;
		// meanwhile the answers are the outage's.
		deadline := time.Now().Add(stepWait)
		for {
			err := ask(dep.name+" back", func(code int, answer map[string]any) (bool, error) {
				if went, err := set.normal(code, answer); err == nil {
					return went, nil
				}
				went, err := dep.degraded(code, answer)
				if err != nil {
					return went, fmt.Errorf("neither a normal answer nor the outage's: %w", err)
				}
				return went, errNotYet
			})
			if err == nil {
				break
			}
			if err != errNotYet || time.Now().After(deadline) {
				t.Fatalf("%s back: %v", dep.name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if lost := s.counts.get("input" + metricConnLost); lost != 0 {
		t.Errorf("the input reported %d lost connections; it answers for its services instead", lost)
	}
	s.stop(t)
}

// errNotYet: the answer is still the outage's.
var errNotYet = errors.New("still the outage's answer")

// callAPI sends a request and decodes the JSON answer.
func callAPI(t *testing.T, base, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: stepWait}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: answer %d is not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// waitReady polls /readyz until it answers 200 "ready".
func waitReady(t *testing.T, base, why string) {
	t.Helper()
	waitReadyAnswer(t, base, http.StatusOK, "status", "ready", why)
}

// waitReadyAnswer polls /readyz until it answers code with field = value.
func waitReadyAnswer(t *testing.T, base string, code int, field, value, why string) {
	t.Helper()
	deadline := time.Now().Add(stepWait)
	for {
		got, answer := callAPI(t, base, http.MethodGet, "/readyz", "", "")
		if got == code && answer[field] == value {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /readyz answered %d %v within %v, want %d with %s %q", why, got, answer, stepWait, code, field, value)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// httpServices is a test database and Redis, each behind a proxy the test
// can cut, with a workspace and an API key.
type httpServices struct {
	pg       *proxiedDB
	appURL   string // speculapro_app through the proxy
	redis    *serviceProxy
	redisURL string
	key      string
}

func newHTTPServices(t *testing.T) *httpServices {
	t.Helper()
	h := &httpServices{pg: newProxiedDB(t)}
	u, err := url.Parse(h.pg.db.AppURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = h.pg.proxy.Addr()
	h.appURL = u.String()
	ru, err := url.Parse(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	h.redis = newServiceProxy(t, ru.Host)
	ru.Host = h.redis.Addr()
	h.redisURL = ru.String()
	k, err := apikey.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.pg.conn.Exec(t.Context(), `INSERT INTO speculapro.api_keys (workspace_id, name, key_prefix, key_hash) VALUES ($1, 'conformance', $2, $3)`,
		h.pg.ws, k.Display, k.Hash); err != nil {
		t.Fatal(err)
	}
	h.key = k.Secret
	return h
}

// transactionItem is transaction n as a client sends it.
func transactionItem(n int) string {
	at := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano)
	return fmt.Sprintf(`{"external_id":"conformance-%d","occurred_at":%q,"account_external_id":"acc-1","customer_external_id":"cust-1",`+
		`"amount":"%d.00","currency":"EUR","direction":"out","counterparty":{"name":"ACME","identifier":"DE89 3704 0044 0532 0130 00"}}`, n, at, n)
}

// itemIs checks that a batch's only item was answered status.
func itemIs(status string, pipelined bool) answerCheck {
	return func(code int, answer map[string]any) (bool, error) {
		results, _ := answer["results"].([]any)
		if code != http.StatusOK || len(results) != 1 {
			return false, fmt.Errorf("answer %d %v, want 200 with one result", code, answer)
		}
		if got, _ := results[0].(map[string]any)["status"].(string); got != status {
			return false, fmt.Errorf("item %s, want %s: %v", got, status, answer)
		}
		return pipelined, nil
	}
}

func prepareIngestAPI(t *testing.T) httpSetup {
	h := newHTTPServices(t)
	k, _ := privateTopic(t)
	enc, fp := identity.DevKeys()
	addr := testenv.FreeAddr(t)
	accepted := itemIs("accepted", true)
	return httpSetup{
		conf: fmt.Sprintf(`ingest_api:
  address: %s
  db_url: %s
  seed_brokers: [ %s ]
  redis_url: %s
  redis_key_prefix: "conformance-%d:"
  ack_timeout: 5s
  encryption_key: %s
  fingerprint_key: %s
`, addr, h.appURL, k.Addr(), h.redisURL, time.Now().UnixNano(), enc, fp),
		base: "http://" + addr, key: h.key,
		request: func(n int) (string, string, string) {
			return http.MethodPost, "/v1/transactions", `{"items":[` + transactionItem(n) + `]}`
		},
		normal: accepted,
		deps: []httpDependency{
			// The key was looked up within the minute, so it keeps working;
			// the stored-ID check is only the resend check's fallback.
			{name: "PostgreSQL", lose: h.pg.proxy.Cut, restore: h.pg.proxy.Restore,
				readyWhenLost: http.StatusServiceUnavailable, readyField: "postgres", readyFieldLost: "unreachable", degraded: accepted},
			// The resend check cannot run: every valid item is answered retry.
			{name: "Redis", lose: h.redis.Cut, restore: h.redis.Restore,
				readyWhenLost: http.StatusServiceUnavailable, readyField: "redis", readyFieldLost: "unreachable",
				degraded: itemIs("retry", false)},
			// Kafka is the output's (kafka_franz answers retry on its own
			// bound, TestConformance); the input's probe says not ready.
			{name: "Kafka", lose: k.Pause, restore: k.Resume,
				readyWhenLost: http.StatusServiceUnavailable, readyField: "kafka", readyFieldLost: "unreachable", degraded: accepted},
		},
	}
}

func prepareDecisionAPI(t *testing.T) httpSetup {
	h := newHTTPServices(t)
	enc, fp := identity.DevKeys()
	addr := testenv.FreeAddr(t)
	unique := time.Now().UnixNano()
	// Every decision, degraded or not, is delivered.
	decided := func(degraded bool, reason string) answerCheck {
		return func(code int, answer map[string]any) (bool, error) {
			if code != http.StatusOK || answer["degraded"] != degraded || (reason != "" && answer["degraded_reason"] != reason) {
				return code == http.StatusOK, fmt.Errorf("answer %d %v, want 200 with degraded %v %s", code, answer, degraded, reason)
			}
			return true, nil
		}
	}
	return httpSetup{
		conf: fmt.Sprintf(`decision_api:
  address: %s
  db_url: %s
  rules_url: %s
  redis_url: %s
  key_prefix: "conformance-%d:"
  spool_prefix: "conformance-%d:"
  reload_interval: 500ms
  max_active_requests: 16
  encryption_key: %s
  fingerprint_key: %s
`, addr, h.appURL, h.pg.url, h.redisURL, unique, unique, enc, fp),
		base: "http://" + addr, key: h.key,
		request: func(n int) (string, string, string) {
			return http.MethodPost, "/v1/decisions", transactionItem(n)
		},
		normal: decided(false, ""),
		deps: []httpDependency{
			// The rules stay loaded and the key was looked up within the
			// minute: decisions go on as usual, /readyz says not ready.
			{name: "PostgreSQL", lose: h.pg.proxy.Cut, restore: h.pg.proxy.Restore,
				readyWhenLost: http.StatusServiceUnavailable, readyField: "postgres", readyFieldLost: "unreachable", degraded: decided(false, "")},
			// Decisions are the fallback, degraded for Redis, and still
			// delivered; /readyz stays ready.
			{name: "Redis", lose: h.redis.Cut, restore: h.redis.Restore,
				readyWhenLost: http.StatusOK, readyField: "redis", readyFieldLost: "unreachable (decisions degraded)", degraded: decided(true, "redis")},
		},
	}
}
