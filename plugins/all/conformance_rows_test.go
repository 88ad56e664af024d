package all_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/webhook"
)

// conformanceRow is one of our inputs or outputs and how to drive it.
type conformanceRow struct {
	name    string
	isInput bool
	lost    lostWith
	// connectChecks: Connect fails while the service is lost, so the
	// component is never reported connected without it.
	connectChecks bool
	prepare       func(t *testing.T) rowSetup
}

// rowSetup is a prepared row: the component's YAML, pointed at a service
// the test can lose, and how to make or check message n.
type rowSetup struct {
	conf          string
	lose, restore func()
	message       func(n int) service.MessageBatch // outputs: message n
	stored        func(n int) bool                 // outputs, optional: message n reached the service
	feed          func(n int)                      // inputs: make message n readable
}

// conformanceRows are every input and output of ours but pg_rule_hits
// (TestConformancePgRuleHits) and the HTTP inputs, ingest_api and
// decision_api, which answer for their services instead of losing a
// connection (httpConformanceRows, TestConformanceHTTPInputs).
var conformanceRows = []conformanceRow{
	{name: "pg_copy_upsert", lost: lostNotConnected, connectChecks: true, prepare: preparePgCopyUpsert},
	{name: "outbox_claim", isInput: true, lost: lostNotConnected, connectChecks: true, prepare: prepareOutboxClaim},
	{name: "outbox_send", lost: lostNotConnected, connectChecks: true, prepare: prepareOutboxSend},
	{name: "redis_spool", lost: lostTaken, connectChecks: true, prepare: prepareRedisSpool},
	{name: "kafka_franz output", lost: lostWriteFails, prepare: prepareKafkaOutput},
	{name: "kafka_franz input", isInput: true, lost: lostRiddenOut, prepare: prepareKafkaInput},
	{name: "case_api", isInput: true, lost: lostRiddenOut, prepare: prepareCaseAPI},
}

// TestConformance runs every component through the engine's contract:
// Connect fails while its service is lost and succeeds once it is back;
// a message goes through; the service is lost (the test's own connection
// cut) and the component does what its row says (service.ErrNotConnected,
// so the engine connects again, for most); the service comes back and a
// message goes through again; Close returns within a bound.
func TestConformance(t *testing.T) {
	for _, row := range conformanceRows {
		t.Run(row.name, func(t *testing.T) { runConformance(t, row) })
	}
}

// TestConformancePgRuleHits is pg_rule_hits' row: a lost connection must
// return service.ErrNotConnected rather than be retried inside WriteBatch.
func TestConformancePgRuleHits(t *testing.T) {
	runConformance(t, conformanceRow{name: "pg_rule_hits", lost: lostNotConnected, connectChecks: true, prepare: preparePgRuleHits})
}

func runConformance(t *testing.T, row conformanceRow) {
	set := row.prepare(t)
	kind := "output"
	if row.isInput {
		kind = "input"
	}
	if row.connectChecks {
		set.lose()
	}
	s := startStream(t, set.conf, row.isInput)
	if row.connectChecks {
		s.counts.waitFor(t, kind+metricConnFailed, 1, "Connect while the service is lost")
		if n := s.counts.get(kind + metricConnUp); n > 0 {
			t.Fatalf("connected %d times while the service was lost", n)
		}
		set.restore()
	}
	s.counts.waitFor(t, kind+metricConnUp, 1, "Connect")
	pass := func(n int, why string) {
		t.Helper()
		if row.isInput {
			set.feed(n)
			s.readOne(t, why)
			return
		}
		if err := s.write(set.message(n), stepWait); err != nil {
			t.Fatalf("%s: writing message %d: %v", why, n, err)
		}
		if set.stored != nil && !set.stored(n) {
			t.Fatalf("%s: message %d was acknowledged but is not stored", why, n)
		}
	}
	pass(1, "with the service up")

	set.lose()
	next := 2
	switch row.lost {
	case lostNotConnected:
		written := make(chan error, 1)
		if !row.isInput {
			// Made here: a row's message may fail t, which only the test's
			// goroutine may do.
			msg := set.message(2)
			go func() { written <- s.write(msg, 2*stepWait) }()
		}
		s.counts.waitFor(t, kind+metricConnLost, 1, "with the service lost, ErrNotConnected")
		set.restore()
		if row.isInput {
			pass(2, "after the service came back")
		} else if err := <-written; err != nil {
			t.Fatalf("message 2, written while the service was lost: %v", err)
		} else if set.stored != nil && !set.stored(2) {
			t.Fatal("message 2, written while the service was lost, was acknowledged but is not stored")
		}
		s.counts.waitFor(t, kind+metricConnUp, 2, "connecting again")
		next = 3
	case lostWriteFails:
		if err := s.write(set.message(2), stepWait); err == nil || err == errNoAnswer {
			t.Fatalf("a write with the service lost returned %v, want its own failure", err)
		}
		set.restore()
	case lostTaken:
		if err := s.write(set.message(2), stepWait); err != nil {
			t.Fatalf("a write with the service lost returned %v, want it taken", err)
		}
		set.restore()
	case lostRiddenOut:
		time.Sleep(2 * time.Second) // lost for a while, not just a blink
		set.restore()
	}
	if row.lost == lostWriteFails {
		passEventually(t, func() error { return s.write(set.message(next), stepWait) })
	} else {
		pass(next, "after the service came back")
	}
	s.stop(t)
}

// passEventually retries write until it succeeds or stepWait passes: a
// client that reconnects by itself takes a moment after the service is back.
func passEventually(t *testing.T, write func() error) {
	t.Helper()
	deadline := time.Now().Add(stepWait)
	for {
		err := write()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write succeeded within %v after the service came back: %v", stepWait, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// proxiedDB is a test database and a proxy to PostgreSQL in front of it.
type proxiedDB struct {
	db    *dbtest.DB
	conn  *pgx.Conn // superuser, straight to PostgreSQL
	proxy *serviceProxy
	url   string // SystemURL through the proxy
	ws    event.UUID
}

func newProxiedDB(t *testing.T) *proxiedDB {
	t.Helper()
	p := &proxiedDB{db: dbtest.New(t)}
	u, err := url.Parse(p.db.SystemURL)
	if err != nil {
		t.Fatal(err)
	}
	p.proxy = newServiceProxy(t, u.Host)
	u.Host = p.proxy.Addr()
	p.url = u.String()
	p.conn = p.db.Connect(t, p.db.SuperuserURL)
	if err := p.conn.QueryRow(t.Context(), "INSERT INTO speculapro.workspaces (name) VALUES ('conformance') RETURNING id").Scan(&p.ws); err != nil {
		t.Fatal(err)
	}
	return p
}

// transaction is transaction n of ws as the kafka_franz input hands it on.
func transaction(t *testing.T, ws event.UUID, n int) *service.Message {
	t.Helper()
	at := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	e := event.Envelope{
		V: event.Version, Kind: event.KindTransaction, WorkspaceID: ws,
		ExternalID: fmt.Sprintf("conformance-%d", n), OccurredAt: at, ReceivedAt: at,
		CustomerExternalID: "cust-1", AccountExternalID: "acc-1",
		Type: "transfer", Status: "completed", Channel: "mobile",
		Amount: strconv.Itoa(n) + ".00", Currency: "EUR", Direction: event.DirectionOut,
	}
	e.ID = event.TransactionID(e.WorkspaceID, e.ExternalID, e.OccurredAt)
	b, err := event.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	m := service.NewMessage(b)
	m.MetaSetMut("kafka_topic", "sp.txn.ingested")
	m.MetaSetMut("kafka_partition", "0")
	m.MetaSetMut("kafka_offset", strconv.Itoa(n))
	m.MetaSetMut("kafka_key", "acc-1")
	return m
}

// pgOutputConf is a PostgreSQL output's YAML: the URL through the proxy,
// short start-up and retry waits, and the output's own fields.
func pgOutputConf(component, url, fields string) string {
	return fmt.Sprintf("%s:\n  url: %s\n  startup_timeout: 2s\n  initial_backoff: 50ms\n  max_backoff: 500ms\n%s", component, url, fields)
}

func preparePgCopyUpsert(t *testing.T) rowSetup {
	p := newProxiedDB(t)
	return rowSetup{
		conf: pgOutputConf("pg_copy_upsert", p.url, "  table: transactions\n  dead_letter:\n    drop: {}\n"),
		lose: p.proxy.Cut, restore: p.proxy.Restore,
		message: func(n int) service.MessageBatch { return service.MessageBatch{transaction(t, p.ws, n)} },
		stored: func(n int) bool {
			var found int
			err := p.conn.QueryRow(context.Background(), "SELECT count(*) FROM speculapro.transactions WHERE external_id = $1",
				fmt.Sprintf("conformance-%d", n)).Scan(&found)
			return err == nil && found == 1
		},
	}
}

func preparePgRuleHits(t *testing.T) rowSetup {
	p := newProxiedDB(t)
	return rowSetup{
		conf: pgOutputConf("pg_rule_hits", p.url, "  kind: transaction\n"),
		lose: p.proxy.Cut, restore: p.proxy.Restore,
		message: func(n int) service.MessageBatch {
			m := transaction(t, p.ws, n)
			m.MetaSetMut("rule_eval", map[string]any{"hits": []any{}})
			return service.MessageBatch{m}
		},
	}
}

func prepareOutboxClaim(t *testing.T) rowSetup {
	p := newProxiedDB(t)
	return rowSetup{
		conf: fmt.Sprintf(`outbox_claim:
  url: %s
  outboxes: [ notification ]
  poll_interval: 100ms
  startup_timeout: 2s
`, p.url),
		lose: p.proxy.Cut, restore: p.proxy.Restore,
		feed: func(n int) {
			if _, err := p.conn.Exec(context.Background(), `
INSERT INTO speculapro.notifications (workspace_id, dedupe_key, kind, channel, recipient, payload)
VALUES ($1, $2, 'alert.created', 'email', 'analyst@bank.test', '{}')`, p.ws, "conformance:"+strconv.Itoa(n)); err != nil {
				t.Fatalf("queueing notification %d: %v", n, err)
			}
		},
	}
}

// prepareOutboxSend: webhook deliveries as outbox_claim hands them on (the
// row claimed by this process), to an endpoint of the test's own.
func prepareOutboxSend(t *testing.T) rowSetup {
	p := newProxiedDB(t)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	enc, _ := identity.DevKeys()
	keys, err := identity.ParseKeyring(enc)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := webhook.SealSecret(keys, p.ws, secret)
	if err != nil {
		t.Fatal(err)
	}
	var endpoint event.UUID
	if err := p.conn.QueryRow(t.Context(), `INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted)
VALUES ($1, $2, $3) RETURNING id`, p.ws, receiver.URL, sealed).Scan(&endpoint); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	claimedBy := host + "/" + strconv.Itoa(os.Getpid())
	ids := map[int]event.UUID{}
	return rowSetup{
		conf: fmt.Sprintf(`outbox_send:
  url: %s
  encryption_key: %s
  allow_insecure: true
  startup_timeout: 2s
`, p.url, enc),
		lose: p.proxy.Cut, restore: p.proxy.Restore,
		message: func(n int) service.MessageBatch {
			var id, eventID event.UUID
			if err := p.conn.QueryRow(context.Background(), `INSERT INTO speculapro.webhook_deliveries
  (workspace_id, endpoint_id, event_type, event_id, payload, attempts, claimed_by, next_attempt_at)
VALUES ($1, $2, 'alert.created', gen_random_uuid(), '{}', 1, $3, now() + interval '1 minute') RETURNING id, event_id`,
				p.ws, endpoint, claimedBy).Scan(&id, &eventID); err != nil {
				t.Fatalf("queueing delivery %d: %v", n, err)
			}
			ids[n] = id
			m := service.NewMessage([]byte(`{}`))
			for k, v := range map[string]string{
				"outbox": "webhook", "outbox_id": id.String(), "workspace_id": p.ws.String(), "attempt": "1",
				"event_type": "alert.created", "event_id": eventID.String(), "endpoint_id": endpoint.String(),
			} {
				m.MetaSetMut(k, v)
			}
			return service.MessageBatch{m}
		},
		// The outcome is recorded as the send ends, after the write returned.
		stored: func(n int) bool {
			deadline := time.Now().Add(stepWait)
			for time.Now().Before(deadline) {
				var status string
				err := p.conn.QueryRow(context.Background(), "SELECT status FROM speculapro.webhook_deliveries WHERE id = $1", ids[n]).Scan(&status)
				if err == nil && status == "delivered" {
					return true
				}
				time.Sleep(50 * time.Millisecond)
			}
			return false
		},
	}
}

func prepareRedisSpool(t *testing.T) rowSetup {
	u, err := url.Parse(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newServiceProxy(t, u.Host)
	u.Host = proxy.Addr()
	return rowSetup{
		conf: fmt.Sprintf(`redis_spool:
  url: %s
  key_prefix: "conformance-%d:"
  stop_wait: 2s
  output:
    drop: {}
`, u.String(), time.Now().UnixNano()),
		lose: proxy.Cut, restore: proxy.Restore,
		message: func(n int) service.MessageBatch {
			return service.MessageBatch{service.NewMessage([]byte(`{"workspace_id":"w","external_id":"e` + strconv.Itoa(n) + `"}`))}
		},
	}
}

// privateTopic starts a Kafka broker of the test's own (pausing it loses
// it for this test alone) with one topic, and a client to it.
func privateTopic(t *testing.T) (*testenv.PrivateKafkaBroker, *kgo.Client) {
	t.Helper()
	k := testenv.PrivateKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, nil, "conformance"); err != nil {
		t.Fatal(err)
	}
	// A paused broker must be running again before the cleanup stops it.
	t.Cleanup(k.Resume)
	return k, cl
}

func prepareKafkaOutput(t *testing.T) rowSetup {
	k, _ := privateTopic(t)
	return rowSetup{
		conf: fmt.Sprintf(`kafka_franz:
  seed_brokers: [ %s ]
  topic: conformance
  timeout: 2s
`, k.Addr()),
		lose: k.Pause, restore: k.Resume,
		message: func(n int) service.MessageBatch {
			return service.MessageBatch{service.NewMessage([]byte("message " + strconv.Itoa(n)))}
		},
	}
}

func prepareKafkaInput(t *testing.T) rowSetup {
	k, cl := privateTopic(t)
	return rowSetup{
		conf: fmt.Sprintf(`kafka_franz:
  seed_brokers: [ %s ]
  topics: [ conformance ]
  consumer_group: conformance
  start_from_oldest: true
  revoke_wait: 1s
`, k.Addr()),
		lose: k.Pause, restore: k.Resume,
		feed: func(n int) {
			ctx, cancel := context.WithTimeout(context.Background(), stepWait)
			defer cancel()
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "conformance", Value: []byte("message " + strconv.Itoa(n))}).FirstErr(); err != nil {
				t.Fatalf("producing message %d: %v", n, err)
			}
		},
	}
}
