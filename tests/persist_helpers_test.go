package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
)

// persistPartitions is the partition count of the persist tests' topics.
const persistPartitions = 3

// persistLogLine matches one of the documented log lines exactly as the
// docs quote it: `level=<LEVEL> msg="<msg>"` followed by the line's own fields
// (rows=…, count=…), upper-case level included.
func persistLogLine(level, msg string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^time=\S+ level=` + level + ` msg="` + regexp.QuoteMeta(msg) + `"( |$).*$`)
}

// persistKafka is one test's topics on the real broker and its group.
type persistKafka struct {
	*testKafka
	prefix string
	group  string
}

// newPersistKafka creates <prefix>txn.ingested, <prefix>account.events and
// their .dlq twins with persistPartitions partitions; cleanup deletes them
// and the groups.
func newPersistKafka(t *testing.T) *persistKafka {
	t.Helper()
	name := uniqueName(t, t.Name())
	k := &persistKafka{testKafka: newTestKafka(t), prefix: name + ".", group: name}
	k.create(t, persistPartitions, k.prefix+"txn.ingested", k.prefix+"txn.ingested.dlq", k.prefix+"account.events", k.prefix+"account.events.dlq")
	k.own(nil, []string{k.group, k.group + "-events"})
	return k
}

// produceTo writes records to <prefix>topic and waits until Kafka has them.
func (k *persistKafka) produceTo(t *testing.T, topic string, recs ...*kgo.Record) {
	t.Helper()
	for _, r := range recs {
		r.Topic = k.prefix + topic
	}
	k.produce(t, recs...)
}

// produceTxns writes transactions from..to-1 of ws (persistTxn) to
// txn.ingested, each under its key (workspace and account).
func (k *persistKafka) produceTxns(t *testing.T, ws event.UUID, from, to int) {
	t.Helper()
	var recs []*kgo.Record
	for n := from; n < to; n++ {
		key, val, _ := persistTxn(t, ws, n, nil)
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: val})
	}
	k.produceTo(t, "txn.ingested", recs...)
}

// consumeAll reads <prefix>topic from the start until want records arrived
// (or waitBound passed) and returns them.
func (k *persistKafka) consumeAll(t *testing.T, topic string, want int) []*kgo.Record {
	t.Helper()
	return k.consume(t, k.prefix+topic, want, waitBound)
}

// committedOffsets is the sum of the group's committed offsets (0 when it
// committed nothing).
func (k *persistKafka) committedOffsets(t *testing.T, group string) int64 {
	t.Helper()
	var sum int64
	for _, parts := range k.committed(t, group) {
		for _, at := range parts {
			sum += at
		}
	}
	return sum
}

// persistBase is when the test transactions happened: fixed per test run, so
// a transaction's ID can be computed again, and inside the partition window.
var persistBase = time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)

// persistTxn is a valid transaction envelope of workspace ws; the same n
// always gives the same envelope and ID.
func persistTxn(t testing.TB, ws event.UUID, n int, tweak func(*event.Envelope)) (key string, value []byte, id event.UUID) {
	t.Helper()
	e := event.Envelope{
		V: event.Version, Kind: event.KindTransaction, WorkspaceID: ws,
		ExternalID:         fmt.Sprintf("txn-%07d", n),
		OccurredAt:         persistBase.Add(time.Duration(n) * time.Millisecond),
		CustomerExternalID: fmt.Sprintf("cust-%d", n%13),
		AccountExternalID:  fmt.Sprintf("acc-%d", n%29),
		Amount:             fmt.Sprintf("%d.25", n), Currency: "EUR", Direction: event.DirectionIn, Type: "card",
	}
	if tweak != nil {
		tweak(&e)
	}
	e.ID = event.TransactionID(e.WorkspaceID, e.ExternalID, e.OccurredAt)
	b, err := event.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return ws.String() + ":" + e.AccountExternalID, b, e.ID
}

// persistRawTxn is persistTxn's envelope changed by tweak as JSON, bypassing
// event.Encode's checks, as a foreign producer would write it.
func persistRawTxn(t testing.TB, ws event.UUID, n int, tweak func(map[string]any)) []byte {
	t.Helper()
	_, b, _ := persistTxn(t, ws, n, nil)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	tweak(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// newPersistFixture is what most persister tests start from: a fresh
// migrated database, topics and a group of the test's own on the shared
// broker, a superuser connection for setting up and checking, and one
// workspace.
func newPersistFixture(t *testing.T) (*dbtest.DB, *persistKafka, *pgx.Conn, event.UUID) {
	t.Helper()
	db := dbtest.New(t)
	k := newPersistKafka(t)
	conn := db.Connect(t, db.SuperuserURL)
	return db, k, conn, persistWorkspace(t, conn)
}

// persistWorkspace creates a workspace through a superuser connection.
func persistWorkspace(t *testing.T, conn *pgx.Conn) event.UUID {
	t.Helper()
	var id event.UUID
	if err := conn.QueryRow(context.Background(),
		"INSERT INTO speculapro.workspaces (name) VALUES ('persist e2e') RETURNING id").Scan(&id); err != nil {
		t.Fatalf("creating workspace: %v", err)
	}
	return id
}

// persistCount runs a count query.
func persistCount(t *testing.T, conn *pgx.Conn, query string, args ...any) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// waitCount polls a count query until it reaches want (or waitBound) and
// returns the last count.
func waitCount(t *testing.T, conn *pgx.Conn, want int, query string, args ...any) int {
	t.Helper()
	n := -1
	poll(waitBound, 200*time.Millisecond, func() bool {
		n = persistCount(t, conn, query, args...)
		return n >= want
	})
	return n
}

// persistEnv is the environment of a persister on k and a database URL.
func persistEnv(k *persistKafka, dbURL string) map[string]string {
	return map[string]string{
		"SP_KAFKA_BROKERS":      strings.Join(k.brokers, ","),
		"SP_KAFKA_TOPIC_PREFIX": k.prefix,
		"SP_PERSIST_GROUP":      k.group,
		"SP_DB_SYSTEM_URL":      dbURL,
	}
}
