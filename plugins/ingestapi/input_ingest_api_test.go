package ingestapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/apisample"
	"github.com/speculapro/speculapro/devtools/openapicheck"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

func TestIngestAPIConfigParses(t *testing.T) {
	enc, fp := identity.DevKeys()
	conf, err := ingestAPISpec().ParseYAML(fmt.Sprintf(`
address: 127.0.0.1:0
seed_brokers: [ "127.0.0.1:19092" ]
max_items: 500
ack_timeout: 12s
encryption_key: %s
fingerprint_key: %s
`, enc, fp), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newIngestAPIFromParsed(conf, service.MockResources())
	if err != nil {
		t.Fatal(err)
	}
	if a.maxItems != 500 || a.MaxBody != apirequest.MaxBodyBytesDefault || a.ackTimeout != 12*time.Second || a.idem.ttl != 24*time.Hour || a.idem.prefix != "sp:" {
		t.Errorf("parsed = items %d, body %d, ack %v, idempotency %v %q", a.maxItems, a.MaxBody, a.ackTimeout, a.idem.ttl, a.idem.prefix)
	}
	conf, _ = ingestAPISpec().ParseYAML("encryption_key: nope\nfingerprint_key: nope\n", nil)
	if _, err := newIngestAPIFromParsed(conf, service.MockResources()); !errors.Is(err, identity.ErrInvalidKey) {
		t.Errorf("bad keys: err = %v, want ErrInvalidKey", err)
	}
}

// Settings reach the plugin through its YAML only: with the keys
// and SP_DB_URL set in the environment but not in the config, the keys are
// missing and db_url is the documented default, not the environment's.
func TestIngestAPIReadsNoEnvironment(t *testing.T) {
	enc, fp := identity.DevKeys()
	t.Setenv("SP_ENCRYPTION_KEY", enc)
	t.Setenv("SP_FINGERPRINT_KEY", fp)
	t.Setenv("SP_DB_URL", "postgres://from-the-environment/x")
	conf, err := ingestAPISpec().ParseYAML("address: 127.0.0.1:0\n", nil)
	if err == nil {
		_, err = newIngestAPIFromParsed(conf, service.MockResources())
	}
	if err == nil {
		t.Fatal("ingest_api built without encryption_key and fingerprint_key: it read the environment")
	}
	conf, err = ingestAPISpec().ParseYAML(fmt.Sprintf("encryption_key: %s\nfingerprint_key: %s\n", enc, fp), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newIngestAPIFromParsed(conf, service.MockResources())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(a.dbURL, "from-the-environment") {
		t.Error("db_url came from SP_DB_URL, not from the config")
	}
}

// fakePipeline plays the engine: it reads the input's batches and acks
// them, failing the messages whose content holds a marker.
type fakePipeline struct {
	mu        sync.Mutex
	delivered [][]byte
	paused    bool
}

func (f *fakePipeline) run(ctx context.Context, a *ingestAPI) {
	for ctx.Err() == nil {
		batch, ack, err := a.ReadBatch(ctx)
		if err != nil {
			return
		}
		f.mu.Lock()
		paused := f.paused
		f.mu.Unlock()
		if paused {
			// A stuck output: the batch is taken and never acked.
			<-ctx.Done()
			return
		}
		var berr *service.BatchError
		for i, m := range batch {
			b, _ := m.AsBytes()
			var merr error
			switch {
			case bytes.Contains(b, []byte("kafka-down")):
				merr = errors.New("writing to topic sp.txn.ingested: Kafka did not take the message within 10s: context deadline exceeded")
			case bytes.Contains(b, []byte("processor-fails")):
				merr = errors.New(iaRejectPrefix + "counterparty_fingerprint: counterparty.identifier: invalid")
			default:
				f.mu.Lock()
				// A copy: once acknowledged, the record's buffer is the
				// next request's (apirequest.RecordSlab), as no real output keeps it.
				f.delivered = append(f.delivered, bytes.Clone(b))
				f.mu.Unlock()
			}
			if merr != nil {
				if berr == nil {
					berr = service.NewBatchError(batch, merr)
				}
				berr = berr.Failed(i, merr)
			}
		}
		if berr != nil {
			_ = ack(ctx, berr)
		} else {
			_ = ack(ctx, nil)
		}
	}
}

func (f *fakePipeline) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.delivered)
}

type apiFixture struct {
	a      *ingestAPI
	base   string
	super  *pgx.Conn
	pipe   *fakePipeline
	doc    *openapicheck.Document
	wsA    event.UUID
	wsB    event.UUID
	keyA   string
	keyB   string
	txTime time.Time
}

func newAPIFixture(t *testing.T) *apiFixture {
	t.Helper()
	return newAPIFixtureWith(t, testenv.RedisURL(t))
}

// newAPIFixtureWith is newAPIFixture with its own Redis URL.
func newAPIFixtureWith(t *testing.T, redisURL string) *apiFixture {
	t.Helper()
	f, yaml := setupAPIFixture(t, redisURL)
	conf, err := ingestAPISpec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.a, err = newIngestAPIFromParsed(conf, service.MockResources())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := f.a.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.pipe.run(pctx, f.a) }()
	t.Cleanup(func() {
		cancel()
		<-done
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = f.a.Close(cctx)
	})
	return f
}

// setupAPIFixture makes the fixture's database, workspaces and keys, and
// returns the ingest_api configuration (YAML) that serves them at f.base.
func setupAPIFixture(t *testing.T, redisURL string) (*apiFixture, string) {
	t.Helper()
	db := dbtest.New(t)
	f := &apiFixture{pipe: &fakePipeline{}, doc: loadOpenAPI(t), txTime: time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)}
	f.super = db.Connect(t, db.SuperuserURL)
	ctx := context.Background()
	for _, w := range []struct {
		ws  *event.UUID
		key *string
	}{{&f.wsA, &f.keyA}, {&f.wsB, &f.keyB}} {
		k, err := apikey.New()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.super.QueryRow(ctx, `INSERT INTO speculapro.workspaces (name) VALUES ('api test') RETURNING id`).Scan(w.ws); err != nil {
			t.Fatal(err)
		}
		if _, err := f.super.Exec(ctx, `INSERT INTO speculapro.api_keys (workspace_id, name, key_prefix, key_hash) VALUES ($1, 'k', $2, $3)`,
			*w.ws, k.Display, k.Hash); err != nil {
			t.Fatal(err)
		}
		*w.key = k.Secret
	}
	enc, fp := identity.DevKeys()
	addr := testenv.FreeAddr(t)
	f.base = "http://" + addr
	return f, fmt.Sprintf(`
address: %s
db_url: %s
seed_brokers: [ "127.0.0.1:1" ]
max_body_bytes: 65536
ack_timeout: 2s
redis_url: %q
redis_key_prefix: %q
idempotency_ttl: 10m
encryption_key: %s
fingerprint_key: %s
`, addr, db.AppURL, redisURL, testRedisPrefix(t), enc, fp)
}

// testRedisPrefix is a Redis key prefix of this test's own.
func testRedisPrefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("sptest:api:%x:", b)
}

// call sends a request and decodes the JSON answer.
func (f *apiFixture) call(t *testing.T, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, f.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: answer %d is not JSON: %s", method, path, resp.StatusCode, raw)
	}
	// Every answer is one the document promises.
	pattern := path
	for _, p := range []string{"/v1/customers/", "/v1/accounts/"} {
		if strings.HasPrefix(path, p) {
			pattern = p + "{external_id}"
		}
	}
	if op, ok := f.doc.Paths[pattern][strings.ToLower(method)]; ok {
		r, ok := op.Responses[fmt.Sprint(resp.StatusCode)]
		if !ok {
			t.Errorf("%s %s answered %d, which openapi.json does not document", method, path, resp.StatusCode)
		} else if errs := f.doc.Validate(r.Content["application/json"].Schema, out, "answer"); len(errs) > 0 {
			t.Errorf("%s %s answer %d does not validate: %v", method, path, resp.StatusCode, errs)
		}
	}
	return resp.StatusCode, out
}

func (f *apiFixture) txn(ext string, extra string) string {
	return fmt.Sprintf(`{"external_id":%q,"occurred_at":%q,"account_external_id":"acc-1","amount":"10.00","currency":"EUR","direction":"in"%s}`,
		ext, f.txTime.Format(time.RFC3339Nano), extra)
}

// results returns each item's status and id.
func results(t *testing.T, out map[string]any) (statuses, ids []string) {
	t.Helper()
	rs, _ := out["results"].([]any)
	for _, r := range rs {
		m := r.(map[string]any)
		s, _ := m["status"].(string)
		id, _ := m["id"].(string)
		statuses, ids = append(statuses, s), append(ids, id)
	}
	return statuses, ids
}

func TestIngestAPIBatchAnswers(t *testing.T) {
	f := newAPIFixture(t)
	body := string(apisample.Batch(f.txn("t-1", ""), f.txn("t-2", `,"counterparty":{"identifier":"DE89370400440532013000"}`),
		`{"external_id":"t-3","occurred_at":"nope","account_external_id":"a","amount":"x","currency":"EUR","direction":"in"}`, f.txn("t-1", "")))
	code, out := f.call(t, "POST", "/v1/transactions", f.keyA, body)
	st, ids := results(t, out)
	if code != 200 || strings.Join(st, ",") != "accepted,accepted,rejected,duplicate" {
		t.Fatalf("answer %d %v: %v", code, st, out)
	}
	wantID := event.TransactionID(f.wsA, "t-1", f.txTime).String()
	if ids[0] != wantID || ids[3] != wantID {
		t.Errorf("ids = %v, want %s for t-1 and its repeat", ids, wantID)
	}
	rej := out["results"].([]any)[2].(map[string]any)["errors"].([]any)
	if len(rej) != 2 || rej[0].(map[string]any)["field"] != "items[2].occurred_at" || rej[1].(map[string]any)["field"] != "items[2].amount" {
		t.Errorf("rejected errors = %v", rej)
	}
	if n := f.pipe.count(); n != 2 {
		t.Fatalf("pipeline got %d messages, want 2 (the repeat is not sent twice)", n)
	}
	for _, b := range f.pipe.delivered {
		e, err := event.Decode(b)
		if err != nil {
			t.Errorf("delivered message: %v", err)
		} else if e.WorkspaceID != f.wsA {
			t.Errorf("delivered workspace %s, want the key's %s", e.WorkspaceID, f.wsA)
		}
	}

	// A resend is a duplicate with the same ID and sends nothing.
	_, out = f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txn("t-1", ""))))
	if st, ids := results(t, out); st[0] != statusDuplicate || ids[0] != wantID || f.pipe.count() != 2 {
		t.Errorf("resend: %v %v, pipeline %d", st, ids, f.pipe.count())
	}
	// The same item from workspace B is B's own, with B's ID.
	_, out = f.call(t, "POST", "/v1/transactions", f.keyB, string(apisample.Batch(f.txn("t-1", ""))))
	if st, ids := results(t, out); st[0] != statusAccepted || ids[0] != event.TransactionID(f.wsB, "t-1", f.txTime).String() {
		t.Errorf("workspace B: %v %v", st, ids)
	}
}

func TestIngestAPIRetryAndStoredDuplicates(t *testing.T) {
	f := newAPIFixture(t)
	_, out := f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(
		f.txn("ok-1", ""), f.txn("kafka-down", ""), f.txn("processor-fails", ""))))
	if st, _ := results(t, out); strings.Join(st, ",") != "accepted,retry,rejected" {
		t.Fatalf("statuses = %v: %v", st, out)
	}
	// The answer is the API's own wording; the output's error (topic names,
	// Go's context errors) stays in the log.
	if msg := out["results"].([]any)[1].(map[string]any)["message"].(string); msg != "not in Kafka; send it again" {
		t.Errorf("retry message = %q, want the API's own wording", msg)
	}

	// Stored by the persister (here: by hand) → duplicate, nothing sent.
	id := event.TransactionID(f.wsA, "stored-1", f.txTime)
	if _, err := f.super.Exec(context.Background(), `INSERT INTO speculapro.transactions
		(id, workspace_id, external_id, account_id, customer_id, amount, currency, direction, occurred_at)
		VALUES ($1, $2, 'stored-1', $3, $3, 10, 'EUR', 'in', $4)`, id, f.wsA, event.AccountID(f.wsA, "acc-1"), f.txTime); err != nil {
		t.Fatal(err)
	}
	before := f.pipe.count()
	_, out = f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txn("stored-1", ""))))
	if st, ids := results(t, out); st[0] != statusDuplicate || ids[0] != id.String() || f.pipe.count() != before {
		t.Errorf("stored item: %v %v, pipeline %d→%d", st, ids, before, f.pipe.count())
	}
	// Workspace B sending the same external_id is not B's duplicate.
	_, out = f.call(t, "POST", "/v1/transactions", f.keyB, string(apisample.Batch(f.txn("stored-1", ""))))
	if st, _ := results(t, out); st[0] != statusAccepted {
		t.Errorf("B's stored-1: %v", st)
	}

	// An output that never acks: every item retry after ack_timeout.
	f.pipe.mu.Lock()
	f.pipe.paused = true
	f.pipe.mu.Unlock()
	start := time.Now()
	_, out = f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txn("slow-1", ""), f.txn("slow-2", ""))))
	if st, _ := results(t, out); strings.Join(st, ",") != "retry,retry" || time.Since(start) < 2*time.Second {
		t.Errorf("stalled pipeline: %v after %v", st, time.Since(start))
	}
}

func TestIngestAPIRefusals(t *testing.T) {
	f := newAPIFixture(t)
	valid := string(apisample.Batch(f.txn("t-1", "")))
	tests := []struct {
		name, key, body string
		code            int
		msg             string
	}{
		{"no key", "", valid, 401, "API key"},
		{"unknown key", func() string { k, _ := apikey.New(); return k.Secret }(), valid, 401, "API key"},
		{"malformed key", "hello", valid, 401, "API key"},
		{"malformed JSON", f.keyA, `{"items":[{`, 400, "malformed request body"},
		{"oversize", f.keyA, `{"items":["` + strings.Repeat("x", 70000) + `"]}`, 413, "larger than 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := f.call(t, "POST", "/v1/transactions", tt.key, tt.body)
			if code != tt.code || !strings.Contains(fmt.Sprint(out["error"]), tt.msg) {
				t.Errorf("answer %d %v; want %d with %q", code, out, tt.code, tt.msg)
			}
		})
	}
	// A workspace named in the body is an unknown field: its item is
	// rejected, nothing is sent.
	code, out := f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txn("t-1", fmt.Sprintf(`,"workspace_id":%q`, f.wsB)))))
	if st, _ := results(t, out); code != 200 || len(st) != 1 || st[0] != statusRejected || !strings.Contains(fmt.Sprint(out["results"]), "items[0].workspace_id") {
		t.Errorf("workspace in body: %d %v", code, out)
	}
	if n := f.pipe.count(); n != 0 {
		t.Errorf("refused requests sent %d messages", n)
	}
	if code, _ := f.call(t, "GET", "/healthz", "", ""); code != 200 {
		t.Errorf("healthz = %d", code)
	}
	// The probe broker 127.0.0.1:1 never answers: not ready, PostgreSQL ok.
	if code, out := f.call(t, "GET", "/readyz", "", ""); code != 503 || out["kafka"] != "unreachable" || out["postgres"] != "ok" {
		t.Errorf("readyz = %d %v", code, out)
	}
	if code, out := f.call(t, "GET", "/v1/openapi.json", "", ""); code != 200 || out["openapi"] != "3.1.0" {
		t.Errorf("openapi.json = %d", code)
	}
}

func TestIngestAPICustomersAndAccounts(t *testing.T) {
	f := newAPIFixture(t)
	ctx := context.Background()
	// The persister's placeholder, replaced by the real record with its ID.
	cust := event.CustomerID(f.wsA, "cust-1")
	if _, err := f.super.Exec(ctx, `INSERT INTO speculapro.customers (id, workspace_id, external_id, placeholder) VALUES ($1, $2, 'cust-1', true)`, cust, f.wsA); err != nil {
		t.Fatal(err)
	}
	code, out := f.call(t, "PUT", "/v1/customers/cust-1", f.keyA, `{"kind":"person","name":"Ada Lovelace","country":"GB","risk_level":"low"}`)
	if code != 200 || out["id"] != cust.String() || out["status"] != "updated" {
		t.Fatalf("PUT customer = %d %v", code, out)
	}
	var placeholder bool
	var name string
	if err := f.super.QueryRow(ctx, `SELECT placeholder, name FROM speculapro.customers WHERE id = $1`, cust).Scan(&placeholder, &name); err != nil || placeholder || name != "Ada Lovelace" {
		t.Errorf("customer row: placeholder=%v name=%q err=%v", placeholder, name, err)
	}

	code, out = f.call(t, "PUT", "/v1/accounts/acc-9", f.keyA, `{"customer_external_id":"cust-new","currency":"EUR","number":"DE89 3704 0044 0532 0130 00","opened_at":"2020-01-01T00:00:00Z"}`)
	if code != 201 || out["id"] != event.AccountID(f.wsA, "acc-9").String() {
		t.Fatalf("PUT account = %d %v", code, out)
	}
	var enc, fp []byte
	var masked string
	var custPlaceholder bool
	if err := f.super.QueryRow(ctx, `SELECT a.number_encrypted, a.number_masked, a.number_fingerprint, c.placeholder
		FROM speculapro.accounts a JOIN speculapro.customers c ON c.id = a.customer_id WHERE a.id = $1`,
		event.AccountID(f.wsA, "acc-9")).Scan(&enc, &masked, &fp, &custPlaceholder); err != nil {
		t.Fatal(err)
	}
	// The fingerprint is the key version byte and 32 bytes of HMAC.
	if masked != "DE89 **** **** **** 3000" || len(fp) != 33 || fp[0] != 1 || bytes.Contains(enc, []byte("0532")) || !bytes.HasPrefix(enc, []byte("dev:")) || !custPlaceholder {
		t.Errorf("account row: masked=%q fp=%d bytes enc=%.10q customer placeholder=%v", masked, len(fp), enc, custPlaceholder)
	}

	code, out = f.call(t, "PUT", "/v1/accounts/acc-10", f.keyA, `{"currency":"euro","number":"DE89370400440532013001","number_kind":"iban"}`)
	if code != 422 || !strings.Contains(fmt.Sprint(out["errors"]), "customer_external_id") || !strings.Contains(fmt.Sprint(out["errors"]), "checksum") {
		t.Errorf("invalid account = %d %v", code, out)
	}
	if code, _ := f.call(t, "PUT", "/v1/customers/cust-1", f.keyA, `{"name":"x","ssn":"1"}`); code != 400 {
		t.Errorf("unknown customer field = %d", code)
	}
	// Workspace B's key writes B's customer, never A's.
	if code, out := f.call(t, "PUT", "/v1/customers/cust-1", f.keyB, `{"name":"Someone else"}`); code != 201 || out["id"] != event.CustomerID(f.wsB, "cust-1").String() {
		t.Errorf("B's PUT = %d %v", code, out)
	}
	if err := f.super.QueryRow(ctx, `SELECT name FROM speculapro.customers WHERE id = $1`, cust).Scan(&name); err != nil || name != "Ada Lovelace" {
		t.Errorf("A's customer after B's PUT: %q %v", name, err)
	}
}

// Item 7: a path ID the database would refuse (NUL, invalid UTF-8) and a
// body that does not arrive in time are answered in our own words, without
// the database's text or socket addresses.
func TestErrorsInOurOwnWords(t *testing.T) {
	old := bodyReadTimeout
	bodyReadTimeout = time.Second
	t.Cleanup(func() { bodyReadTimeout = old })
	f := newAPIFixture(t)
	for _, path := range []string{"/v1/customers/a%00b", "/v1/accounts/%ff%fe", "/v1/customers/%20%20"} {
		code, out := f.call(t, "PUT", path, f.keyA, `{}`)
		msg := fmt.Sprint(out["error"])
		if code != 400 || !strings.HasPrefix(msg, "external_id in the path: want") || strings.Contains(msg, "SQLSTATE") || strings.Contains(msg, "0x") {
			t.Errorf("PUT %s: %d %q", path, code, msg)
		}
	}

	conn, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /v1/customers/slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"na", f.keyA)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || strings.Contains(string(raw), "127.0.0.1") || !strings.Contains(string(raw), "did not arrive within 1s") {
		t.Errorf("slow body: %d %s", resp.StatusCode, raw)
	}
}

// Item 5: nothing the API accepts is refused by PostgreSQL. Every value
// event.CheckJSONB accepts, jsonb takes as it is (and a \u0000 or a number
// numeric cannot hold is rejected on its item, never accepted then
// dead-lettered); an account closed before it opened is refused.
func TestNothingAcceptedTheDatabaseRefuses(t *testing.T) {
	f := newAPIFixture(t)
	ctx := context.Background()
	for _, v := range []string{`{"a":"\u0000"}`, `{"a":1e999999}`, `{"a":1e131072}`, `{"a":"\ud800"}`, `{"a":1e999}`, `{"a":-0.5e-999}`,
		`{"a":"\u00e9\ud83d\ude00"}`, `{"a":[1,{"b":"c"}]}`, "{\"a\":\"\xc3\x28\"}"} {
		if event.CheckJSONB([]byte(v)) != nil {
			continue
		}
		var out string
		if err := f.super.QueryRow(ctx, `SELECT $1::jsonb::text`, v).Scan(&out); err != nil {
			t.Errorf("CheckJSONB accepts %q, PostgreSQL refuses it: %v", v, err)
		}
	}
	code, out := f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(
		f.txn("nul-1", `,"metadata":{"note":"a\u0000b"}`), f.txn("big-1", `,"metadata":{"n":1e999999}`), f.txn("ok-1", ""))))
	if st, _ := results(t, out); code != 200 || strings.Join(st, ",") != "rejected,rejected,accepted" {
		t.Errorf("metadata jsonb would refuse: %d %v", code, out)
	}
	code, out = f.call(t, "PUT", "/v1/accounts/acc-closed", f.keyA, `{"customer_external_id":"c-1","opened_at":"2026-01-02T00:00:00Z","closed_at":"2026-01-01T00:00:00Z"}`)
	if code != 422 || !strings.Contains(fmt.Sprint(out["errors"]), "closed_at") {
		t.Errorf("account closed before it opened: %d %v", code, out)
	}
	code, out = f.call(t, "PUT", "/v1/customers/c-dup", f.keyA, `{"name":"a","name":"b"}`)
	if code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "twice") {
		t.Errorf("customer with a duplicate key: %d %v", code, out)
	}
}

// TestBatchAnswerIsMarshal: a batch answer is json.Marshal's bytes, for
// every kind of result and text needing escapes.
func TestBatchAnswerIsMarshal(t *testing.T) {
	for _, resp := range []batchResponse{
		{},
		{Results: []itemResult{}},
		{Accepted: 2, Duplicate: 1, Rejected: 1, Retry: 1, Conflict: 1, Results: []itemResult{
			{Index: 0, ExternalID: "t-1", Status: statusAccepted, ID: "0193f5a2-7c00-7abc-8def-0123456789ab"},
			{Index: 1, ExternalID: `<a href="x">&\u2028` + "\u2029\x01\t\xff é", Status: statusDuplicate, ID: "0193f5a2-7c00-7abc-8def-0123456789ab"},
			{Index: 2, Status: statusRejected, Errors: []apirequest.FieldError{{Field: "items[2].amount", Message: "required"}, {Field: "items[2].x<", Message: `want "a"`}}},
			{Index: 3, ExternalID: "t-4", Status: statusRetry, ID: "0193f5a2-7c00-7abc-8def-0123456789ac", Message: "send it again & again"},
			{Index: 4, ExternalID: "t-5", Status: statusConflict, ID: "x", Message: msgConflict, Errors: []apirequest.FieldError{}},
		}},
	} {
		want, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendBatchResponse(nil, &resp); !bytes.Equal(got, want) {
			t.Errorf("answer\n%s\njson.Marshal\n%s", got, want)
		}
	}
}

// A request's record buffers are reused only when no record in them can
// be read again: deliver is settled when the pipeline acknowledged every
// message, or never took the batch, and not settled while the output may
// still hold the records (a failed write, no acknowledgement in time).
func TestRecordBuffersReusedOnlyOnceAcknowledged(t *testing.T) {
	for _, tt := range []struct {
		name string
		ack  func(*job) // nil: nobody takes the batch
		want bool
	}{
		{"acknowledged", func(j *job) { j.done <- nil }, true},
		{"failed", func(j *job) { j.done <- errors.New("writing to topic sp.txn.ingested: broken") }, false},
		{"no acknowledgement in time", func(*job) {}, false},
		{"not taken", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &ingestAPI{jobs: make(chan *job), closing: make(chan struct{}), ackTimeout: 200 * time.Millisecond}
			a.Log = service.MockResources().Logger()
			if tt.ack != nil {
				go func() { tt.ack(<-a.jobs) }()
			}
			items := []*apirequest.Item{{Index: 0, Value: []byte(`{}`), Key: "k"}}
			results := make([]itemResult, 1)
			if got := a.deliver(event.KindTransaction, "txn.ingested", items, results); got != tt.want {
				t.Errorf("settled %v, want %v (answered %s)", got, tt.want, results[0].Status)
			}
		})
	}
}
