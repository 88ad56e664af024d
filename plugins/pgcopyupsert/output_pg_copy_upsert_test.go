package pgcopyupsert

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/pgwritetest"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/pgwrite"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
	"github.com/speculapro/speculapro/internal/retry"
)

// --- fixtures -------------------------------------------------------------

// persistMetricsOf is the output's metrics, recorded in m.
func persistMetricsOf(m *testenv.Metrics) *persistMetrics {
	mk := m.Metric
	return &persistMetrics{
		batches: mk("batches"), stored: mk("stored"), skipped: mk("skipped"),
		placeholders: mk("placeholders"), counterparties: mk("counterparties"), deadLetters: mk("dead_letters"),
		retries: mk("retries"), faults: mk("faults"), stage: mk("stage"),
	}
}

// decodedTxns is b as the pipeline's event_decode step hands transactions
// to the output: each message carries its decoded envelope.
func decodedTxns(t testing.TB, b service.MessageBatch) service.MessageBatch {
	t.Helper()
	decoded := make(service.MessageBatch, len(b))
	for i, msg := range b {
		env, err := eventmsg.Decode(msg, event.KindTransaction)
		if err != nil {
			t.Fatal(err)
		}
		decoded[i] = eventmsg.With(msg, env)
	}
	return decoded
}

// retriesUntilFixed runs write while the database refuses its batch
// (pgwritetest.RetriesUntilFixed).
func (h *harness) retriesUntilFixed(t *testing.T, retryLine string, owner *pgx.Conn, fix string, write func() error) {
	pgwritetest.RetriesUntilFixed(t, h.logs, retryLine, owner, fix, write)
}

// fakeDLQ keeps what was dead-lettered.
type fakeDLQ struct {
	mu      sync.Mutex
	letters []*service.Message
}

func (d *fakeDLQ) WriteBatch(_ context.Context, b service.MessageBatch) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.letters = append(d.letters, b...)
	return nil
}

type harness struct {
	t    *testing.T
	db   *dbtest.DB
	out  *pgCopyUpsert
	dlq  *fakeDLQ
	logs *testenv.SyncBuffer
	m    *testenv.Metrics
	// attempt, when set before newOutput, is attempt_timeout.
	attempt time.Duration
	conn    *pgx.Conn // superuser, to inspect and to break things
	ws      event.UUID
}

func newHarness(t *testing.T, table string) *harness {
	t.Helper()
	return newHarnessOf(t, table, 0)
}

// newHarnessWith is a transactions harness whose output has attempt_timeout
// attempt.
func newHarnessWith(t *testing.T, attempt time.Duration) *harness {
	t.Helper()
	return newHarnessOf(t, tableTransactions, attempt)
}

func newHarnessOf(t *testing.T, table string, attempt time.Duration) *harness {
	t.Helper()
	db := dbtest.New(t)
	h := &harness{t: t, db: db, dlq: &fakeDLQ{}, logs: &testenv.SyncBuffer{}, m: &testenv.Metrics{}, attempt: attempt}
	h.conn = db.Connect(t, db.SuperuserURL)
	h.ws = h.workspace("acme")
	h.out = h.newOutput(table, db.SystemURL)
	return h
}

func (h *harness) newOutput(table, url string) *pgCopyUpsert {
	h.t.Helper()
	logger := service.NewLoggerFromSlog(slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	out, err := newPgCopyUpsert(pcuOptions{
		url: url, table: table, maxConns: 2,
		initialBackoff: 20 * time.Millisecond, maxBackoff: 200 * time.Millisecond,
		attemptTimeout: h.attemptTimeout(), startupTimeout: 10 * time.Second,
	}, h.dlq, service.MockResources(service.MockResourcesOptUseLogger(logger)))
	if err != nil {
		h.t.Fatalf("newPgCopyUpsert: %v", err)
	}
	out.m = persistMetricsOf(h.m)
	out.policy.Retries, out.policy.Faults = out.m.retries, out.m.faults
	h.t.Cleanup(func() { _ = out.Close(context.Background()) })
	if err := out.Connect(context.Background()); err != nil {
		h.t.Fatalf("Connect: %v", err)
	}
	return out
}

// Markers of the rows refuseMarkedRows makes the database refuse. Decode
// refuses every value the table cannot hold, so a row the database refuses
// needs a rule Decode does not know: a test constraint and a test trigger.
const (
	refusedCheck = "refused-by-check"   // 23514, constraint test_refused
	refusedData  = "refused-by-trigger" // 22023, raised by the trigger test_refuse
)

// refuseMarkedRows makes the database refuse transactions whose reference is
// refusedCheck or refusedData, as a customer's own constraint or trigger
// would.
func (h *harness) refuseMarkedRows() {
	h.t.Helper()
	h.exec(`ALTER TABLE speculapro.transactions ADD CONSTRAINT test_refused CHECK (reference IS DISTINCT FROM '` + refusedCheck + `')`)
	h.exec(`CREATE FUNCTION speculapro.test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.reference = '` + refusedData + `' THEN
    RAISE EXCEPTION 'test: the trigger refuses this row' USING ERRCODE = '22023';
  END IF;
  RETURN NEW;
END $$`)
	h.exec(`CREATE TRIGGER test_refuse BEFORE INSERT ON speculapro.transactions FOR EACH ROW EXECUTE FUNCTION speculapro.test_refuse()`)
}

// dropFuturePartition drops the transactions partition of the month two
// months from now (inside Decode's window) and returns a time in it and the
// statement that creates it again.
func (h *harness) dropFuturePartition() (time.Time, string) {
	h.t.Helper()
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month()+2, 1, 0, 0, 0, 0, time.UTC)
	h.exec(`DROP TABLE speculapro.transactions_p` + month.Format("2006_01"))
	return month.Add(5*24*time.Hour + 10*time.Hour), "SELECT speculapro.ensure_partitions('" + month.Format(time.DateOnly) + "', 1)"
}

// attemptTimeout is the output's attempt_timeout: 30 s unless a test set
// h.attempt.
func (h *harness) attemptTimeout() time.Duration {
	if h.attempt > 0 {
		return h.attempt
	}
	return 30 * time.Second
}

// workspace, count and exec work on the test database as its superuser.
func (h *harness) workspace(name string) event.UUID { return pgwritetest.Workspace(h.t, h.conn, name) }

func (h *harness) count(query string, args ...any) int {
	return pgwritetest.Count(h.t, h.conn, query, args...)
}

func (h *harness) exec(query string, args ...any) { pgwritetest.Exec(h.t, h.conn, query, args...) }

// The records the tests write (pgwritetest).
var (
	baseTime = pgwritetest.BaseTime
	txn      = pgwritetest.Txn
	encode   = pgwritetest.Encode
	batchOf  = pgwritetest.BatchOf
	txnBatch = pgwritetest.TxnBatch
)

func (h *harness) write(b service.MessageBatch) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.out.WriteBatch(ctx, b); err != nil {
		h.t.Fatalf("WriteBatch: %v", err)
	}
}

// --- tests -----------------------------------------------------------------

func TestStoresBatchWithPlaceholdersAndReplayAddsNothing(t *testing.T) {
	h := newHarness(t, tableTransactions)
	b := txnBatch(t, h.ws, 0, 100, nil)
	h.write(b)

	if n := h.count("SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1", h.ws); n != 100 {
		t.Fatalf("stored %d transactions, want 100", n)
	}
	if n := h.count("SELECT count(*) FROM speculapro.customers WHERE placeholder"); n != 7 {
		t.Errorf("%d placeholder customers, want 7", n)
	}
	if n := h.count("SELECT count(*) FROM speculapro.accounts WHERE placeholder"); n != 11 {
		t.Errorf("%d placeholder accounts, want 11", n)
	}
	// Every transaction points at the deterministic customer and account,
	// and the values arrived exactly.
	if n := h.count(`SELECT count(*) FROM speculapro.transactions t
		JOIN speculapro.accounts a ON a.id = t.account_id AND a.external_id = 'acc-' || (substr(t.external_id, 5)::int % 11)
		JOIN speculapro.customers c ON c.id = t.customer_id AND c.external_id = 'cust-' || (substr(t.external_id, 5)::int % 7)
		WHERE t.amount = (substr(t.external_id, 5)::int + (substr(t.external_id, 5)::int % 100) / 100.0)
		  AND t.metadata = jsonb_build_object('n', substr(t.external_id, 5)::int)
		  AND t.currency = 'EUR' AND t.direction = 'out' AND t.kind = 'transfer'`); n != 100 {
		t.Errorf("%d of 100 transactions stored with the right keys and values", n)
	}
	if got := h.m.Get("placeholders{transactions,customer}") + h.m.Get("placeholders{transactions,account}"); got != 18 {
		t.Errorf("placeholders counted %d, want 18", got)
	}

	// A replay, whole and in a different split, stores nothing new.
	h.write(b)
	h.write(txnBatch(t, h.ws, 50, 150, nil))
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 150 {
		t.Fatalf("after replays: %d transactions, want 150", n)
	}
	if n := h.count("SELECT count(*) FROM speculapro.customers") + h.count("SELECT count(*) FROM speculapro.accounts"); n != 18 {
		t.Errorf("after replays: %d customers+accounts, want 18", n)
	}
	if s, k := h.m.Get("stored{transactions}"), h.m.Get("skipped{transactions}"); s != 150 || k != 150 {
		t.Errorf("counted stored=%d skipped=%d, want 150 and 150", s, k)
	}

	// A record repeated inside one batch is written once.
	dup := txnBatch(t, h.ws, 200, 201, nil)
	h.write(append(dup, dup[0].Copy()))
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 151 {
		t.Errorf("a batch repeating a record: %d transactions, want 151", n)
	}
	if len(h.dlq.letters) != 0 {
		t.Errorf("%d dead letters, want none", len(h.dlq.letters))
	}
}

func TestRealRecordReplacesPlaceholder(t *testing.T) {
	h := newHarness(t, tableTransactions)
	h.write(txnBatch(t, h.ws, 0, 1, nil)) // names cust-0 and acc-0

	// The real records arrive the way the ingest API writes them.
	h.exec(`INSERT INTO speculapro.customers (id, workspace_id, external_id, name, placeholder)
		VALUES ($1, $2, 'cust-0', 'Ada', false)
		ON CONFLICT (workspace_id, external_id) DO UPDATE SET name = EXCLUDED.name, placeholder = false`,
		event.CustomerID(h.ws, "cust-0"), h.ws)
	h.exec(`INSERT INTO speculapro.accounts (id, workspace_id, external_id, customer_id, kind, placeholder)
		VALUES ($1, $2, 'acc-0', $3, 'current', false)
		ON CONFLICT (workspace_id, external_id) DO UPDATE SET kind = EXCLUDED.kind, placeholder = false`,
		event.AccountID(h.ws, "acc-0"), h.ws, event.CustomerID(h.ws, "cust-0"))

	// Later transactions, and a replay of the first, leave the real records alone.
	h.write(txnBatch(t, h.ws, 0, 23, nil))
	if n := h.count(`SELECT count(*) FROM speculapro.accounts WHERE external_id = 'acc-0' AND NOT placeholder AND kind = 'current'`); n != 1 {
		t.Errorf("the real account was overwritten by a placeholder")
	}
	if n := h.count(`SELECT count(*) FROM speculapro.customers WHERE external_id = 'cust-0' AND NOT placeholder AND name = 'Ada'`); n != 1 {
		t.Errorf("the real customer was overwritten by a placeholder")
	}

	// A transaction without its customer belongs to its account's customer.
	h.write(txnBatch(t, h.ws, 1000, 1001, func(e *event.Envelope) {
		e.CustomerExternalID, e.AccountExternalID = "", "acc-0"
	}))
	if n := h.count(`SELECT count(*) FROM speculapro.transactions WHERE external_id = 'txn-001000' AND customer_id = $1`,
		event.CustomerID(h.ws, "cust-0")); n != 1 {
		t.Errorf("a transaction naming only a known account did not get the account's customer")
	}
}

func TestCounterpartiesDeduplicatedAndLinked(t *testing.T) {
	h := newHarness(t, tableTransactions)
	fp := func(s string) string { return hex.EncodeToString([]byte(s + strings.Repeat("0", 32-len(s)))) }

	// A monitored account whose number has the keyed fingerprint "own".
	h.exec(`INSERT INTO speculapro.customers (id, workspace_id, external_id) VALUES ($1, $2, 'c-own')`,
		event.CustomerID(h.ws, "c-own"), h.ws)
	h.exec(`INSERT INTO speculapro.accounts (id, workspace_id, external_id, customer_id, number_fingerprint)
		VALUES ($1, $2, 'a-own', $3, decode($4, 'hex'))`,
		event.AccountID(h.ws, "a-own"), h.ws, event.CustomerID(h.ws, "c-own"), fp("own"))

	withCP := func(dedupe, identity string) func(*event.Envelope) {
		return func(e *event.Envelope) {
			e.Counterparty = &event.Counterparty{
				Name: "Hausverwaltung Müller GmbH", IdentifierKind: "iban", IdentifierEnc: "k1:AAAA",
				IdentifierMasked: "DE89 **** 3000", IdentifierFP: fp(identity), Fingerprint: fp(dedupe),
			}
		}
	}
	// 30 transactions to one recipient, 30 to our own customer's account,
	// and the same recipient in a second workspace.
	b := txnBatch(t, h.ws, 0, 30, withCP("landlord", "landlord-iban"))
	b = append(b, txnBatch(t, h.ws, 30, 60, withCP("own-dedupe", "own"))...)
	other := h.workspace("other")
	b = append(b, txnBatch(t, other, 60, 70, withCP("landlord", "landlord-iban"))...)
	h.write(b)

	if n := h.count("SELECT count(*) FROM speculapro.counterparties"); n != 3 {
		t.Fatalf("%d counterparties, want 3 (one per workspace and fingerprint)", n)
	}
	if n := h.count(`SELECT count(*) FROM speculapro.counterparties c JOIN speculapro.accounts a ON a.id = c.account_id
		WHERE a.external_id = 'a-own' AND c.fingerprint = decode($1, 'hex')`, fp("own-dedupe")); n != 1 {
		t.Errorf("the counterparty with our account's fingerprint is not linked to it")
	}
	if n := h.count("SELECT count(*) FROM speculapro.counterparties WHERE account_id IS NULL"); n != 2 {
		t.Errorf("%d unlinked counterparties, want 2", n)
	}
	if n := h.count(`SELECT count(*) FROM speculapro.transactions t JOIN speculapro.counterparties c
		ON c.id = t.counterparty_id AND c.workspace_id = t.workspace_id`); n != 70 {
		t.Errorf("%d of 70 transactions point at their counterparty", n)
	}
	if got := h.m.Get("counterparties{transactions}"); got != 3 {
		t.Errorf("counterparties created counted %d, want 3", got)
	}

	// Across batches: the same recipient is found, not created again; an
	// account registered later with its fingerprint gets linked.
	h.exec(`INSERT INTO speculapro.accounts (id, workspace_id, external_id, customer_id, number_fingerprint)
		VALUES ($1, $2, 'a-landlord', $3, decode($4, 'hex'))`,
		event.AccountID(h.ws, "a-landlord"), h.ws, event.CustomerID(h.ws, "c-own"), fp("landlord-iban"))
	h.write(txnBatch(t, h.ws, 100, 110, withCP("landlord", "landlord-iban")))
	if n := h.count("SELECT count(*) FROM speculapro.counterparties"); n != 3 {
		t.Errorf("after a second batch: %d counterparties, want 3", n)
	}
	if n := h.count(`SELECT count(*) FROM speculapro.counterparties c JOIN speculapro.accounts a ON a.id = c.account_id
		WHERE a.external_id = 'a-landlord'`); n != 1 {
		t.Errorf("a counterparty seen before its account was registered is not linked once it is")
	}
	if got := h.m.Get("counterparties{transactions}"); got != 3 {
		t.Errorf("counterparties created counted %d after the second batch, want still 3", got)
	}
}

func TestRowTheDatabaseRefusesIsDeadLetteredAlone(t *testing.T) {
	h := newHarness(t, tableTransactions)
	h.refuseMarkedRows()
	b := txnBatch(t, h.ws, 0, 40, func(e *event.Envelope) {
		switch e.ExternalID {
		case "txn-000007":
			e.Reference = refusedCheck
		case "txn-000031":
			e.Reference = refusedData
		}
	})
	b = append(b, batchOf(t, 40, []byte("not json at all"))...)
	h.write(b)

	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 38 {
		t.Fatalf("stored %d transactions, want the 38 good ones", n)
	}
	got := map[string]string{}
	for _, m := range h.dlq.letters {
		off, _ := m.MetaGet("source-offset")
		code, _ := m.MetaGet("error-code")
		got[off] = code
		if trace, _ := m.MetaGet("trace"); !strings.HasSuffix(off, "/"+strings.TrimPrefix(trace, "t-")) {
			t.Errorf("dead letter %s lost its headers (trace=%q)", off, trace)
		}
	}
	want := map[string]string{"sp.txn.ingested/2/7": "23514", "sp.txn.ingested/2/31": "22023", "sp.txn.ingested/2/40": ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("dead letters (source-offset: error-code) = %v, want %v", got, want)
	}
	for _, m := range h.dlq.letters {
		if off, _ := m.MetaGet("source-offset"); off == "sp.txn.ingested/2/7" {
			raw, _ := m.AsBytes()
			if !bytes.Contains(raw, []byte(`"reference":"`+refusedCheck+`"`)) {
				t.Errorf("dead letter does not carry the original value: %s", raw)
			}
			if msg, _ := m.MetaGet("error-message"); !strings.Contains(msg, "test_refused") {
				t.Errorf("error-message = %q, want the database's message", msg)
			}
		}
	}
	if !strings.Contains(h.logs.String(), `msg="persist: sent undecodable records to dead-letter topic"`) ||
		!strings.Contains(h.logs.String(), "count=1") {
		t.Errorf("no WARN line for the undecodable record:\n%s", h.logs.String())
	}
	if h.m.Get("dead_letters{transactions,rejected}") != 2 || h.m.Get("dead_letters{transactions,undecodable}") != 1 {
		t.Errorf("dead letters counted %v", h.m)
	}
	if h.m.Get("retries{transactions}") != 0 || h.m.Get("faults{transactions}") != 0 {
		t.Errorf("a row's fault was retried: %v", h.m)
	}
}

func TestRetriesUntilTheOperatorFixesIt(t *testing.T) {
	tests := []struct {
		name       string
		tweak      func(*event.Envelope)
		breakIt    string
		fixIt      string
		errMention string
	}{
		{
			name:       "permission missing",
			breakIt:    "REVOKE INSERT ON speculapro.transactions FROM speculapro_system",
			fixIt:      "GRANT INSERT ON speculapro.transactions TO speculapro_system",
			errMention: "permission denied",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tableTransactions)
			owner := h.db.Connect(t, h.db.OwnerURL)
			if tt.breakIt != "" {
				if _, err := owner.Exec(context.Background(), tt.breakIt); err != nil {
					t.Fatal(err)
				}
			}
			h.retriesUntilFixed(t, logBatchRetry, owner, tt.fixIt, func() error {
				return h.out.WriteBatch(context.Background(), txnBatch(t, h.ws, 0, 10, tt.tweak))
			})
			if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 10 {
				t.Errorf("stored %d, want 10", n)
			}
			logs := h.logs.String()
			line := logs[strings.Index(logs, logBatchRetry)-30:]
			line = line[:strings.IndexByte(line, '\n')]
			for _, want := range []string{"level=ERROR", `msg="persist: batch failed, retrying"`, "rows=10", tt.errMention, "backoff="} {
				if !strings.Contains(line, want) {
					t.Errorf("retry line %q lacks %q", line, want)
				}
			}
			retries := int64(strings.Count(logs, logBatchRetry))
			if got := h.m.Get("retries{transactions}"); got != retries {
				t.Errorf("retries counted %d, %d logged", got, retries)
			}
			if got := h.m.Get("faults{transactions}"); got != 1 {
				t.Errorf("faults counted %d, want 1 for one failing batch", got)
			}
			if len(h.dlq.letters) != 0 {
				t.Errorf("%d rows dead-lettered for a failure an operator can fix", len(h.dlq.letters))
			}
		})
	}
}

// A record waiting for a month's partition holds back only its own Kafka
// partition: the batch's other partitions are stored, and the waiting
// partition's records, all of them, are handed back to the input with a
// wait, once per batch, never dead-lettered. Once the partition exists,
// the records delivered again are stored.
func TestMissingPartitionHandsBackOnlyItsPartition(t *testing.T) {
	h := newHarness(t, tableTransactions)
	at, fixIt := h.dropFuturePartition()
	var b service.MessageBatch
	for p := range 3 {
		part := txnBatch(t, h.ws, p*100, p*100+10, func(e *event.Envelope) {
			if p == 1 {
				e.OccurredAt = at // its month has no partition
			}
		})
		part = append(part, batchOf(t, 900+p, []byte("not json"))...)
		for _, m := range part {
			m.MetaSetMut("kafka_partition", strconv.Itoa(p))
		}
		b = append(b, part...)
	}
	var waited []int
	for round := 1; round <= 2; round++ {
		idx := b.Index() // as the input indexes what it hands out
		err := h.out.WriteBatch(context.Background(), b)
		var bErr *service.BatchError
		if !errors.As(err, &bErr) {
			t.Fatalf("round %d: WriteBatch = %v, want a batch error naming the waiting records", round, err)
		}
		if wait := retry.WaitOf(err); wait <= 0 {
			t.Errorf("round %d: no wait asked for", round)
		} else {
			waited = append(waited, int(wait/time.Millisecond))
		}
		failed := map[int]bool{}
		bErr.WalkMessagesIndexedBy(idx, func(i int, _ *service.Message, err error) bool {
			if err != nil {
				failed[i] = true
			}
			return true
		})
		for i, m := range b {
			part, _ := m.MetaGet("kafka_partition")
			if failed[i] != (part == "1") {
				t.Errorf("round %d: message %d of partition %s failed=%v", round, i, part, failed[i])
			}
		}
		b = b.Copy() // as delivered again
	}
	if waited[1] < waited[0] {
		t.Errorf("waits %v ms: the second wait is shorter than the first", waited)
	}
	if f, r := h.m.Get("faults{transactions}"), h.m.Get("retries{transactions}"); f != 1 || r != 2 {
		t.Errorf("faults=%d retries=%d, want one fault (the partition started waiting) and a retry per hand-back", f, r)
	}
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 20 {
		t.Errorf("stored %d, want the 20 rows of partitions 0 and 2", n)
	}
	if len(h.dlq.letters) != 4 {
		t.Errorf("%d dead letters, want the undecodable records of partitions 0 and 2, once per batch (4)", len(h.dlq.letters))
	}
	logs := h.logs.String()
	if strings.Count(logs, logBatchRetry) != 2 || !strings.Contains(logs, "rows=10 ") || !strings.Contains(logs, `no partition of relation \"transactions\" found`) {
		t.Errorf("want one retry line per round, naming the 10 waiting rows and the missing partition:\n%s", logs)
	}
	h.exec(fixIt)
	var again service.MessageBatch
	for _, m := range b {
		if part, _ := m.MetaGet("kafka_partition"); part == "1" {
			again = append(again, m)
		}
	}
	h.write(again)
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 30 {
		t.Errorf("stored %d after the fix, want 30", n)
	}
	if len(h.dlq.letters) != 5 {
		t.Errorf("%d dead letters after the fix, want 5", len(h.dlq.letters))
	}
}

func TestShutdownWhileRetryingIsNoFault(t *testing.T) {
	h := newHarness(t, tableTransactions)
	owner := h.db.Connect(t, h.db.OwnerURL)
	if _, err := owner.Exec(context.Background(), "REVOKE INSERT ON speculapro.transactions FROM speculapro_system"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.out.WriteBatch(ctx, txnBatch(t, h.ws, 0, 10, nil)) }()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(h.logs.String(), logBatchRetry) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no retries logged within 30 s:\n%s", h.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteBatch after shutdown: %v, want context.Canceled", err)
	}
	logged := int64(strings.Count(h.logs.String(), logBatchRetry))
	if got := h.m.Get("retries{transactions}"); got != logged {
		t.Errorf("retries counted %d, logged %d", got, logged)
	}
	if got := h.m.Get("faults{transactions}"); got != 1 {
		t.Errorf("faults = %d, want 1: the shutdown is not a fault", got)
	}
	if got := h.m.Get("batches{transactions}"); got != 0 {
		t.Errorf("a cancelled batch was counted as written")
	}
}

func TestAccountEvents(t *testing.T) {
	h := newHarness(t, tableAccountEvents)
	ev := func(n int, account string) []byte {
		e := event.Envelope{
			V: event.Version, Kind: event.KindAccountEvent, WorkspaceID: h.ws,
			ExternalID: fmt.Sprintf("ev-%d", n), OccurredAt: baseTime.Add(time.Duration(n) * time.Second),
			CustomerExternalID: fmt.Sprintf("cust-%d", n%3), AccountExternalID: account,
			Type: "sign_in", Attributes: []byte(`{"ip":"203.0.113.7"}`),
		}
		e.ID = event.AccountEventID(e.WorkspaceID, e.ExternalID, e.OccurredAt)
		return encode(t, e)
	}
	var vals [][]byte
	for n := range 20 {
		acct := ""
		if n%2 == 0 {
			acct = fmt.Sprintf("acc-%d", n%4)
		}
		vals = append(vals, ev(n, acct))
	}
	txnOnEvents := encode(t, txn(h.ws, 1, nil))
	b := batchOf(t, 0, append(vals, txnOnEvents)...)
	h.write(b)
	h.write(b) // replay

	if n := h.count("SELECT count(*) FROM speculapro.account_events WHERE kind = 'sign_in' AND payload->>'ip' = '203.0.113.7'"); n != 20 {
		t.Errorf("%d account events stored, want 20", n)
	}
	if n := h.count("SELECT count(*) FROM speculapro.customers WHERE placeholder"); n != 3 {
		t.Errorf("%d placeholder customers, want 3", n)
	}
	if n := h.count("SELECT count(*) FROM speculapro.accounts WHERE placeholder"); n != 2 {
		t.Errorf("%d placeholder accounts, want 2", n)
	}
	if n := h.count("SELECT count(*) FROM speculapro.account_events WHERE account_id IS NULL"); n != 10 {
		t.Errorf("%d events without an account, want 10", n)
	}
	if len(h.dlq.letters) != 2 {
		t.Errorf("%d dead letters, want the transaction on the events topic, once per delivery", len(h.dlq.letters))
	}
}

func TestStartupRefusesRoleBoundByRowLevelSecurity(t *testing.T) {
	db := dbtest.New(t)
	out, err := newPgCopyUpsert(pcuOptions{
		url: db.AppURL, table: tableTransactions, maxConns: 1,
		initialBackoff: time.Millisecond, maxBackoff: time.Millisecond,
		attemptTimeout: time.Second, startupTimeout: 10 * time.Second,
	}, &fakeDLQ{}, service.MockResources())
	if err != nil {
		t.Fatalf("the constructor does no I/O, so it cannot refuse the role: %v", err)
	}
	defer out.Close(context.Background())
	requireConnectRefuses(t, out.Connect)
}

// The constructor does no I/O: with PostgreSQL unreachable it returns at
// once, and Connect, not the constructor, waits for PostgreSQL, and stops
// waiting when its context ends (a SIGTERM during start-up).
func TestConstructorDoesNoIO(t *testing.T) {
	start := time.Now()
	out, err := newPgCopyUpsert(pcuOptions{
		url: "postgres://speculapro_system:x@127.0.0.1:1/speculapro?connect_timeout=1", table: tableTransactions, maxConns: 1,
		initialBackoff: time.Millisecond, maxBackoff: time.Millisecond,
		attemptTimeout: time.Second, startupTimeout: time.Minute,
	}, &fakeDLQ{}, service.MockResources())
	if err != nil {
		t.Fatalf("newPgCopyUpsert with PostgreSQL unreachable: %v", err)
	}
	defer out.Close(context.Background())
	if took := time.Since(start); took > time.Second {
		t.Errorf("the constructor took %s: it reached for PostgreSQL", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start = time.Now()
	if err := out.Connect(ctx); err == nil {
		t.Fatal("Connect succeeded with PostgreSQL unreachable")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Connect ignored its context for %s (startup_timeout is a minute)", took)
	}
}

// TestBatchOf5000 stores a full default-size batch and reports its rate
// (a figure for the report, not an assertion on speed).
func TestBatchOf5000(t *testing.T) {
	h := newHarness(t, tableTransactions)
	fp := hex.EncodeToString([]byte("recipient-0000000000000000000000"))
	b := txnBatch(t, h.ws, 0, 5000, func(e *event.Envelope) {
		e.CustomerExternalID = "cust-" + strconv.Itoa(len(e.ExternalID)%500)
		e.Counterparty = &event.Counterparty{Name: "R", Fingerprint: fp[:60] + e.ExternalID[len(e.ExternalID)-2:] + "00"}
	})
	decoded := decodedTxns(t, b) // as the pipeline's event_decode step leaves them
	start := time.Now()
	h.write(decoded)
	took := time.Since(start)
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 5000 {
		t.Fatalf("stored %d, want 5000", n)
	}
	t.Logf("5000-row batch written in %s (%.0f rows/s)", took.Round(time.Millisecond), 5000/took.Seconds())
	start = time.Now()
	h.write(decoded)
	t.Logf("replay of the same 5000 rows in %s", time.Since(start).Round(time.Millisecond))
	// The replay stored nothing twice and knew it: every row skipped.
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 5000 {
		t.Errorf("after the replay: %d rows, want 5000", n)
	}
	if got := h.m.Get("stored{transactions}"); got != 5000 {
		t.Errorf("rows stored counted %d over both writes, want 5000", got)
	}
	if got := h.m.Get("skipped{transactions}"); got != 5000 {
		t.Errorf("rows skipped counted %d, want the 5000 of the replay", got)
	}
	if got := h.m.Get("batches{transactions}"); got != 2 {
		t.Errorf("batches counted %d, want 2", got)
	}
	if len(h.dlq.letters) != 0 || h.m.Get("retries{transactions}") != 0 {
		t.Errorf("the replay dead-lettered %d or retried %d", len(h.dlq.letters), h.m.Get("retries{transactions}"))
	}
}

// TestIsolatingIsBounded: 5,000 rows the database refuses, in one batch,
// with an attempt timeout far shorter than isolating them takes. Each
// attempt carries on from what the one before learned, so the batch
// finishes: every bad row dead-lettered, the good ones stored. Starting
// over each time never finishes (every attempt would isolate the same first
// rows and time out), so finishing after more than one attempt is the proof;
// how many attempts it takes depends on how fast the machine writes.
func TestIsolatingIsBounded(t *testing.T) {
	h := newHarnessWith(t, 100*time.Millisecond)
	h.refuseMarkedRows()
	b := txnBatch(t, h.ws, 0, 5010, func(e *event.Envelope) {
		if n, _ := strconv.Atoi(strings.TrimPrefix(e.ExternalID, "txn-")); n >= 10 {
			e.Reference = refusedCheck
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	if err := h.out.WriteBatch(ctx, b); err != nil {
		t.Fatalf("WriteBatch after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	took := time.Since(start)
	attempts := h.m.Get("retries{transactions}") + 1
	t.Logf("5,000 bad rows of 5,010 isolated in %s over %d attempts of at most %s", took.Round(time.Millisecond), attempts, pgwrite.IsolateTimeoutFactor*h.attempt)
	// About 5,030 writes cannot fit in one attempt of 500 ms.
	if attempts < 2 {
		t.Errorf("isolated in one attempt of %s: the test no longer proves that an attempt carries on from the one before", took)
	}
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 10 {
		t.Errorf("stored %d, want the 10 good rows", n)
	}
	if len(h.dlq.letters) != 5000 {
		t.Errorf("%d dead letters, want 5000", len(h.dlq.letters))
	}
}

func TestBatchOfAnUnknownWorkspaceIsRejectedWithoutBisecting(t *testing.T) {
	h := newHarness(t, tableTransactions)
	unknown := event.UUID{0x01, 0x93, 0xf5, 0xa2, 0x70, 0x00, 0x7a, 0xbc, 0x8d, 0xef, 1, 2, 3, 4, 5, 6}
	b := txnBatch(t, unknown, 0, 2000, nil)
	b = append(b, txnBatch(t, h.ws, 5000, 5010, nil)...)
	start := time.Now()
	h.write(b)
	t.Logf("2010-row batch with 2000 rows of an unknown workspace written in %s", time.Since(start).Round(time.Millisecond))
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 10 {
		t.Errorf("stored %d, want the 10 rows of the known workspace", n)
	}
	if len(h.dlq.letters) != 2000 {
		t.Fatalf("%d dead letters, want 2000", len(h.dlq.letters))
	}
	for _, m := range h.dlq.letters {
		if code, _ := m.MetaGet("error-code"); code != "23503" {
			t.Fatalf("error-code %q, want 23503", code)
		}
	}
	if !strings.Contains(h.logs.String(), "codes=23503") || !strings.Contains(h.logs.String(), "count=2000") {
		t.Errorf("no WARN line for the refused rows:\n%s", h.logs.String())
	}
}

func TestManyBadRowsAreAllIsolated(t *testing.T) {
	h := newHarness(t, tableTransactions)
	h.refuseMarkedRows()
	b := txnBatch(t, h.ws, 0, 200, func(e *event.Envelope) {
		if n, _ := strconv.Atoi(strings.TrimPrefix(e.ExternalID, "txn-")); n%2 == 1 {
			e.Reference = refusedCheck
		}
	})
	start := time.Now()
	h.write(b)
	t.Logf("200-row batch with 100 bad rows isolated in %s", time.Since(start).Round(time.Millisecond))
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 100 {
		t.Errorf("stored %d, want the 100 good rows", n)
	}
	if len(h.dlq.letters) != 100 {
		t.Errorf("%d dead letters, want 100", len(h.dlq.letters))
	}
}

var requireConnectRefuses = pgwritetest.RequireConnectRefuses

// TestUndecodableRecordsAreParkedWithTheirReason: the persist pipelines have
// no event_decode step, so the output reads the records itself. Each record
// it cannot read is dead-lettered as it arrived with the reason event_decode
// would have flagged it with, and the readable ones of the batch are stored.
func TestUndecodableRecordsAreParkedWithTheirReason(t *testing.T) {
	for _, tc := range []struct {
		table string
		good  func(h *harness) []byte
		bad   map[string]string // record → what its error-message says
	}{
		{tableTransactions, func(h *harness) []byte { return encode(t, txn(h.ws, 1, nil)) }, map[string]string{
			`not json at all`: "not a JSON event envelope",
			`{"v":2,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab"}`:           "unknown event version",
			`{"v":1,"kind":"transaction","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d"}`: "event has no id",
			`{"v":1,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab"}`:           "event has no workspace_id",
			`{"v":1,"kind":"account_event","id":"0193f5a2-7c00-7abc-8def-0123456789ac","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"ev-1","occurred_at":"2026-11-30T07:41:12Z","customer_external_id":"cust-1","type":"sim_swap"}`: "a account_event event on a transaction topic",
		}},
		{tableAccountEvents, func(h *harness) []byte {
			e := event.Envelope{V: event.Version, Kind: event.KindAccountEvent, WorkspaceID: h.ws, ExternalID: "ev-1",
				OccurredAt: baseTime, CustomerExternalID: "cust-1", Type: "sign_in"}
			e.ID = event.AccountEventID(e.WorkspaceID, e.ExternalID, e.OccurredAt)
			return encode(t, e)
		}, map[string]string{
			`{"v":1`: "not a JSON event envelope",
			`{"v":1,"kind":"account_event","id":"0193f5a2-7c00-7abc-8def-0123456789ac","external_id":"ev-1"}`: "event has no workspace_id",
			string(encode(t, txn(event.UUID{1}, 2, nil))):                                                     "a transaction event on a account_event topic",
		}},
	} {
		t.Run(tc.table, func(t *testing.T) {
			h := newHarness(t, tc.table)
			vals := [][]byte{tc.good(h)}
			for rec := range tc.bad {
				vals = append(vals, []byte(rec))
			}
			h.write(batchOf(t, 0, vals...))
			if n := h.count("SELECT count(*) FROM speculapro." + tc.table); n != 1 {
				t.Errorf("%d rows stored, want the one readable record", n)
			}
			if len(h.dlq.letters) != len(tc.bad) {
				t.Fatalf("%d dead letters, want %d", len(h.dlq.letters), len(tc.bad))
			}
			for _, m := range h.dlq.letters {
				raw, _ := m.AsBytes()
				want, ok := tc.bad[string(raw)]
				msg, _ := m.MetaGet(metaErrorMessage)
				if !ok || !strings.Contains(msg, want) {
					t.Errorf("dead letter %q says %q, want it unchanged and saying %q", raw, msg, want)
				}
			}
			if h.m.Get("dead_letters{"+tc.table+",undecodable}") != int64(len(tc.bad)) {
				t.Errorf("dead letters counted %v", h.m)
			}
		})
	}
}

// --- a lost connection ----------------------------------------------------

// refuseConnections makes the test database refuse new connections and cuts
// the output's own, so the next statement finds its connection gone and
// every ping fails. It returns a superuser connection to another database
// (ALLOW_CONNECTIONS cannot be switched from the database itself) and the
// statement that lets connections in again, which cleanup also runs.
func (h *harness) refuseConnections(t *testing.T) (maintenance *pgx.Conn, allow string) {
	t.Helper()
	ctx := context.Background()
	maintenance, err := pgx.Connect(ctx, testenv.PostgresSuperuserURL(t))
	if err != nil {
		t.Fatal(err)
	}
	db := pgx.Identifier{h.db.Name}.Sanitize()
	allow = "ALTER DATABASE " + db + " ALLOW_CONNECTIONS true"
	t.Cleanup(func() {
		_, _ = maintenance.Exec(ctx, allow)
		_ = maintenance.Close(ctx)
	})
	if _, err := maintenance.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	h.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", h.db.Name)
	return maintenance, allow
}

// loseConnection hands a batch of 10 to the output while PostgreSQL refuses
// connections: it must come back as not connected, its fault counted.
func (h *harness) loseConnection(t *testing.T) (batch service.MessageBatch, maintenance *pgx.Conn, allow string) {
	t.Helper()
	maintenance, allow = h.refuseConnections(t)
	batch = txnBatch(t, h.ws, 0, 10, nil)
	if err := h.out.WriteBatch(context.Background(), batch); !errors.Is(err, service.ErrNotConnected) {
		t.Fatalf("WriteBatch with the connection lost: %v, want service.ErrNotConnected", err)
	}
	if got := h.m.Get("faults{transactions}"); got != 1 {
		t.Errorf("faults counted %d, want 1", got)
	}
	return batch, maintenance, allow
}

// After a lost connection Connect waits for PostgreSQL by the output's own
// backoff, logging each wait before it makes it, and returns once
// PostgreSQL takes connections again; the batch then stores.
func TestLostConnectionConnectWaitsByItsOwnBackoff(t *testing.T) {
	h := newHarness(t, tableTransactions)
	batch, maintenance, allow := h.loseConnection(t)
	h.retriesUntilFixed(t, logBatchRetry, maintenance, allow, func() error {
		return h.out.Connect(context.Background())
	})

	// Every wait for PostgreSQL is one retry line naming the batch and the
	// wait that follows it, and one retry counted.
	var waits int64
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if !strings.Contains(line, logBatchRetry) {
			continue
		}
		waits++
		if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "rows=10") || !strings.Contains(line, "backoff=") {
			t.Errorf("retry line %q lacks the level, the batch's rows or the wait", line)
		}
	}
	if got := h.m.Get("retries{transactions}"); got != waits {
		t.Errorf("retries counted %d, %d waits logged", got, waits)
	}
	if got := h.m.Get("faults{transactions}"); got != 1 {
		t.Errorf("faults counted %d after reconnecting, want still 1", got)
	}
	if err := h.out.WriteBatch(context.Background(), batch); err != nil {
		t.Fatalf("WriteBatch after reconnecting: %v", err)
	}
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 10 {
		t.Errorf("stored %d, want 10", n)
	}
}

// Shutdown ends Connect's wait at once, with the context's error.
func TestShutdownEndsTheWaitForPostgreSQL(t *testing.T) {
	h := newHarness(t, tableTransactions)
	h.loseConnection(t)
	ctx, cancel := context.WithCancel(context.Background())
	connected := make(chan error, 1)
	go func() { connected <- h.out.Connect(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-connected:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Connect at shutdown: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Connect kept waiting after shutdown")
	}
}
