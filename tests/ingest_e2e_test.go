package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// ingestResult is one item's answer from the ingest API.
type ingestResult struct {
	Index   int    `json:"index"`
	Status  string `json:"status"`
	ID      string `json:"id"`
	Message string `json:"message"`
	Errors  []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

type ingestAnswer struct {
	Accepted  int            `json:"accepted"`
	Duplicate int            `json:"duplicate"`
	Rejected  int            `json:"rejected"`
	Retry     int            `json:"retry"`
	Results   []ingestResult `json:"results"`
	Error     string         `json:"error"`
}

// ingestCLI runs a speculapro admin command and returns its key=value lines.
func ingestCLI(t testing.TB, dbURL string, args ...string) map[string]string {
	t.Helper()
	stdout, stderr, code := runBin(t, map[string]string{"SP_DB_URL": dbURL}, args...)
	if code != 0 {
		t.Fatalf("speculapro %s: exit code %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// ingestWorkspace creates a workspace and a second key through the CLI, as
// an operator would, and returns the workspace and the second key.
func ingestWorkspace(t testing.TB, appURL string) (event.UUID, string) {
	t.Helper()
	created := ingestCLI(t, appURL, "workspace", "create", "--name", "ingest e2e")
	ws, err := event.ParseUUID(created["workspace_id"])
	if err != nil || !strings.HasPrefix(created["api_key"], "spk_") {
		t.Fatalf("workspace create printed %v", created)
	}
	more := ingestCLI(t, appURL, "apikey", "create", "--workspace", ws.String(), "--name", "e2e")
	if !strings.HasPrefix(more["api_key"], "spk_") || more["api_key"] == created["api_key"] {
		t.Fatalf("apikey create printed %v", more)
	}
	return ws, more["api_key"]
}

// ingestEnv is the environment of one process running ingest and persist.
// The test's topic prefix is its Redis key prefix too, and its resend keys
// expire after 10 minutes, so the shared Redis is left clean.
func ingestEnv(brokers []string, prefix, group string, db *dbtest.DB, ingestAddr string) map[string]string {
	enc, fp := identity.DevKeys()
	return map[string]string{
		"SP_REDIS_KEY_PREFIX":       prefix,
		"SP_INGEST_IDEMPOTENCY_TTL": "10m",
		"SP_KAFKA_BROKERS":          strings.Join(brokers, ","),
		"SP_KAFKA_TOPIC_PREFIX":     prefix,
		"SP_PERSIST_GROUP":          group,
		"SP_DB_URL":                 db.AppURL,
		"SP_DB_SYSTEM_URL":          db.SystemURL,
		"SP_INGEST_ADDR":            ingestAddr,
		"SP_ENCRYPTION_KEY":         enc,
		"SP_FINGERPRINT_KEY":        fp,
	}
}

// ingestStreamsArgs runs the API and the persister in one process, as
// `speculapro dev` does.
var ingestStreamsArgs = []string{"streams", "-o", "config/observability.yaml", "pipelines/ingest.yaml", "pipelines/persist.yaml"}

// ingestPost sends a JSON body with the key and decodes the answer.
func ingestPost(t testing.TB, client *http.Client, base, key, path string, body []byte) (int, ingestAnswer) {
	t.Helper()
	var a ingestAnswer
	return ingestPostInto(t, client, base, key, path, body, &a), a
}

// ingestCounts is an answer's counts alone: the benchmark's clients share
// the cores with the server they measure, and decoding 500 results a
// request into structs took a tenth of a core.
type ingestCounts struct {
	Accepted int    `json:"accepted"`
	Rejected int    `json:"rejected"`
	Retry    int    `json:"retry"`
	Error    string `json:"error"`
}

// ingestPostInto sends a request and decodes its JSON answer into out.
func ingestPostInto(t testing.TB, client *http.Client, base, key, path string, body []byte, out any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("POST %s: answer %d is not JSON: %.300s", path, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// ingestWaitReady waits until /readyz says Kafka and PostgreSQL answer.
func ingestWaitReady(t testing.TB, p *binProcess, base string) {
	t.Helper()
	if !poll(waitBound, 200*time.Millisecond, func() bool {
		if !p.running() {
			t.Fatalf("speculapro exited before the API was ready")
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("ingest API at %s not ready within %v", base, waitBound)
	}
}

// ingestTxn is transaction n as a client sends it, with a clear IBAN and
// phone number among its counterparties.
func ingestTxn(n int, at time.Time) map[string]any {
	cp := map[string]any{"name": fmt.Sprintf("Payee %d", n%7)}
	switch n % 3 {
	case 0:
		cp["identifier"], cp["identifier_kind"] = "DE89 3704 0044 0532 0130 00", "iban"
	case 1:
		cp["identifier"], cp["identifier_kind"] = fmt.Sprintf("+49 171 55%05d", n), "phone"
	}
	return map[string]any{
		"external_id":          fmt.Sprintf("e2e-%06d", n),
		"occurred_at":          at.Add(time.Duration(n) * time.Millisecond).Format(time.RFC3339Nano),
		"account_external_id":  fmt.Sprintf("acc-%d", n%11),
		"customer_external_id": fmt.Sprintf("cust-%d", n%11),
		"amount":               fmt.Sprintf("%d.%02d", n, n%100),
		"currency":             "EUR",
		"direction":            []string{"in", "out"}[n%2],
		"counterparty":         cp,
	}
}

func ingestBody(t testing.TB, items ...map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIngestE2E: the real binary, real Kafka and PostgreSQL, the persister
// in the same process. Accepted items are stored once; a resend is
// duplicate with the same IDs; invalid items are rejected precisely while
// the valid items of the same request are accepted; the topic never holds
// a clear identifier that was sent.
func TestIngestE2E(t *testing.T) {
	t.Parallel()
	k := newPersistKafka(t)
	db := dbtest.New(t)
	ws, key := ingestWorkspace(t, db.AppURL)
	addr := testenv.FreeAddr(t)
	base := "http://" + addr
	p := newBinProcess(t)
	p.start(t, ingestEnv(k.brokers, k.prefix, k.group, db, addr), ingestStreamsArgs...)
	ingestWaitReady(t, p, base)
	client := &http.Client{Timeout: 60 * time.Second}

	const n = 60
	at := persistBase
	items := make([]map[string]any, 0, n+2)
	for i := range n {
		items = append(items, ingestTxn(i, at))
	}
	bad := ingestTxn(9999, at)
	bad["amount"], bad["currency"] = 12.5, "eur"
	badIBAN := ingestTxn(9998, at)
	badIBAN["counterparty"] = map[string]any{"identifier": "DE89370400440532013001", "identifier_kind": "iban"}
	items = append(items[:10], append([]map[string]any{bad, badIBAN}, items[10:]...)...)

	code, ans := ingestPost(t, client, base, key, "/v1/transactions", ingestBody(t, items...))
	if code != http.StatusOK || ans.Accepted != n || ans.Rejected != 2 || ans.Retry != 0 || ans.Duplicate != 0 {
		t.Fatalf("answer %d: accepted %d rejected %d retry %d duplicate %d (%s)", code, ans.Accepted, ans.Rejected, ans.Retry, ans.Duplicate, ans.Error)
	}
	wantErr := map[string]string{
		"items[10].amount":                  "not a JSON number",
		"items[10].currency":                "ISO 4217",
		"items[11].counterparty.identifier": "checksum",
	}
	for _, r := range ans.Results[10:12] {
		for _, e := range r.Errors {
			if !strings.Contains(e.Message, wantErr[e.Field]) || wantErr[e.Field] == "" {
				t.Errorf("item %d error %s: %q", r.Index, e.Field, e.Message)
			}
			delete(wantErr, e.Field)
		}
	}
	if len(wantErr) > 0 {
		t.Errorf("missing rejections: %v", wantErr)
	}
	ids := map[string]string{} // external_id → id
	for i, r := range ans.Results {
		if r.Status != "accepted" {
			continue
		}
		ext := items[i]["external_id"].(string)
		occurred, _ := time.Parse(time.RFC3339Nano, items[i]["occurred_at"].(string))
		if want := event.TransactionID(ws, ext, occurred).String(); r.ID != want {
			t.Errorf("item %d id %s, want TransactionID %s", i, r.ID, want)
		}
		ids[ext] = r.ID
	}

	conn := db.Connect(t, db.SuperuserURL)
	if got := waitCount(t, conn, n, `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1`, ws); got != n {
		t.Fatalf("stored %d transactions, want %d", got, n)
	}

	// The resend: every valid item a duplicate with the same ID.
	_, again := ingestPost(t, client, base, key, "/v1/transactions", ingestBody(t, items...))
	if again.Duplicate != n || again.Accepted != 0 || again.Rejected != 2 {
		t.Errorf("resend: accepted %d duplicate %d rejected %d", again.Accepted, again.Duplicate, again.Rejected)
	}
	for i, r := range again.Results {
		if ext, _ := items[i]["external_id"].(string); r.Status == "duplicate" && r.ID != ids[ext] {
			t.Errorf("resend item %d id %s, first answer %s", i, r.ID, ids[ext])
		}
	}
	time.Sleep(time.Second)
	if got := persistCount(t, conn, `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1`, ws); got != n {
		t.Errorf("after the resend %d transactions stored, want %d", got, n)
	}
	var masked int
	if masked = persistCount(t, conn, `SELECT count(*) FROM speculapro.counterparties WHERE workspace_id = $1 AND identifier_masked = 'DE89 **** **** **** 3000'`, ws); masked != 1 {
		t.Errorf("%d counterparties with the masked IBAN, want 1 (de-duplicated by fingerprint)", masked)
	}

	// The topic never holds a clear identifier that was sent.
	recs := k.consumeAll(t, "txn.ingested", n)
	if len(recs) != n {
		t.Errorf("%d records on txn.ingested, want %d", len(recs), n)
	}
	clear := []string{"DE89 3704", "DE89370400440532013000", "370400440532013000", "+49 171 55", "+4917155"}
	for _, r := range recs {
		for _, c := range clear {
			if bytes.Contains(r.Value, []byte(c)) || bytes.Contains(r.Key, []byte(c)) {
				t.Fatalf("record at offset %d holds a clear identifier (%q)", r.Offset, c)
			}
		}
		if !strings.HasPrefix(string(r.Key), ws.String()+":acc-") {
			t.Errorf("record key %q, want <workspace>:<account>", r.Key)
		}
	}

	// Account events go to account.events keyed by workspace and customer.
	events := make([]map[string]any, 3)
	for i := range events {
		events[i] = map[string]any{"external_id": fmt.Sprintf("ev-%d", i), "occurred_at": at.Format(time.RFC3339Nano),
			"customer_external_id": fmt.Sprintf("cust-%d", i), "type": "sim_swap", "attributes": map[string]any{"carrier": "T"}}
	}
	if _, ev := ingestPost(t, client, base, key, "/v1/account-events", ingestBody(t, events...)); ev.Accepted != len(events) {
		t.Errorf("account events: %+v", ev)
	}
	evRecs := k.consumeAll(t, "account.events", len(events))
	if len(evRecs) != len(events) {
		t.Errorf("%d records on account.events, want %d", len(evRecs), len(events))
	}
	for _, r := range evRecs {
		e, err := event.Decode(r.Value)
		if err != nil || e.Kind != event.KindAccountEvent || string(r.Key) != ws.String()+":"+e.CustomerExternalID {
			t.Errorf("account event record key %q: %+v %v", r.Key, e, err)
		}
	}
	// The ingest role counts account events into the customers' running
	// totals at once, under the installation's key prefix: a stream reading
	// another prefix would never see them.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(t)})
	defer rdb.Close()
	waitUntil(t, 10*time.Second, "the customers' running totals under the key prefix", func() error {
		n := 0
		it := rdb.Scan(context.Background(), 0, k.prefix+"{c:*", 1000).Iterator()
		for it.Next(context.Background()) {
			n++
		}
		if err := it.Err(); err != nil {
			return err
		}
		if n < len(events) {
			return fmt.Errorf("%d customer keys under %q, want %d", n, k.prefix, len(events))
		}
		return nil
	})

	// A key of another workspace writes only to its own workspace.
	ws2, key2 := ingestWorkspace(t, db.AppURL)
	_, other := ingestPost(t, client, base, key2, "/v1/transactions", ingestBody(t, items[0]))
	if other.Accepted != 1 || other.Results[0].ID == ids[items[0]["external_id"].(string)] {
		t.Errorf("workspace 2's copy of item 0: %+v", other)
	}
	if got := waitCount(t, conn, 1, `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1`, ws2); got != 1 {
		t.Errorf("workspace 2 has %d transactions, want 1", got)
	}
	if code, _ := ingestPost(t, client, base, "spk_"+strings.Repeat("0", 64), "/v1/transactions", ingestBody(t, items[0])); code != http.StatusUnauthorized {
		t.Errorf("unknown key answered %d", code)
	}

	scrape, err := p.scrape()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := metricSum(scrape, "speculapro_ingest_items_total"), float64(2*(n+2)+len(events)+1); got != want {
		t.Errorf("speculapro_ingest_items_total = %v, want %v", got, want)
	}
	if !strings.Contains(scrape, "speculapro_ingest_request_duration") {
		t.Error("/metrics has no request latency")
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

// TestIngestAPIKeyForUnknownWorkspace: `speculapro apikey create` refuses a
// workspace that does not exist instead of minting a useless key.
func TestIngestAPIKeyForUnknownWorkspace(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	stdout, stderr, code := runBin(t, map[string]string{"SP_DB_URL": db.AppURL}, "apikey", "create", "--workspace", "6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d")
	if out := stdout + stderr; code == 0 || !strings.Contains(out, "no such workspace") || strings.Contains(out, "spk_") {
		t.Errorf("apikey create for an unknown workspace: exit code %d\n%s", code, out)
	}
	conn := db.Connect(t, db.SuperuserURL)
	if n := persistCount(t, conn, `SELECT count(*) FROM speculapro.api_keys`); n != 0 {
		t.Errorf("%d API keys stored", n)
	}
}
