package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
)

// `speculapro dev` is what `make run` starts: with no SP_KAFKA_BROKERS it runs
// an embedded broker, migrates, creates the topics and runs every pipeline.
// A transaction produced to the embedded broker must reach PostgreSQL, /metrics
// must serve engine metrics, Ctrl-C must stop it with exit 0, and a second
// start on the same data folder must find its topics (and records) kept.
func TestDevRunsWholePipelineWithEmbeddedBroker(t *testing.T) {
	t.Parallel()
	db := dbtest.NewBootstrapped(t)
	env := map[string]string{
		"SP_DB_SUPERUSER_URL": testenv.PostgresSuperuserURL(t),
		"SP_DB_OWNER_URL":     db.OwnerURL,
		"SP_DB_URL":           db.AppURL,
		"SP_DB_SYSTEM_URL":    db.SystemURL,
		"SP_DATA_DIR":         t.TempDir(),
		"SP_PERSIST_GROUP":    "dev-e2e",
		"SP_INGEST_ADDR":      testenv.FreeAddr(t),
		"SP_DECISION_ADDR":    testenv.FreeAddr(t),
		"SP_CASE_ADDR":        testenv.FreeAddr(t),
	}
	kafkaAddr := testenv.FreeAddr(t)
	dev := newBinProcess(t).start(t, env, "dev", "--kafka-addr", kafkaAddr)
	waitUntil(t, 90*time.Second, "dev to serve /metrics", func() error {
		body, err := dev.scrape()
		if err == nil && !strings.Contains(body, "input_connection_up") {
			err = errors.New("no input_connection_up metric yet")
		}
		return err
	})
	// The worker runs too: its partition check reports the months covered.
	waitUntil(t, 30*time.Second, "dev's worker to report its partition check", func() error {
		body, err := dev.scrape()
		if err == nil && !strings.Contains(body, "speculapro_worker_partitions_covered_until_seconds") {
			err = errors.New("no speculapro_worker_partitions_covered_until_seconds metric yet")
		}
		return err
	})
	for _, want := range []string{"created sp.txn.ingested", "created sp.account.events.dlq", "embedded Kafka broker on " + kafkaAddr} {
		if !strings.Contains(dev.stdout.String(), want) {
			t.Errorf("dev output lacks %q:\n%s", want, dev.stdout)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws := event.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	conn := db.Connect(t, db.SystemURL)
	if _, err := conn.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'dev test')`, ws); err != nil {
		t.Fatalf("creating workspace: %v", err)
	}
	stored := func(n int, ids ...string) func() error {
		return func() error {
			var got int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM transactions WHERE external_id = ANY($1)`, ids).Scan(&got); err != nil {
				return err
			}
			if got != n {
				return fmt.Errorf("%d of %d stored", got, n)
			}
			return nil
		}
	}
	produceTransaction(ctx, t, kafkaAddr, ws, "dev-txn-1")
	waitUntil(t, 60*time.Second, "the transaction to be stored", stored(1, "dev-txn-1"))
	devStop(t, dev)

	// Second start on the same folder: the topics survived, so none is created.
	dev2 := newBinProcess(t)
	dev2.httpAddr = dev.httpAddr
	dev2.start(t, env, "dev", "--kafka-addr", kafkaAddr)
	waitUntil(t, 90*time.Second, "dev to serve /metrics again", func() error {
		_, err := dev2.scrape()
		return err
	})
	if strings.Contains(dev2.stdout.String(), "created sp.") {
		t.Errorf("second dev start created topics again; the embedded broker lost its data:\n%s", dev2.stdout)
	}
	produceTransaction(ctx, t, kafkaAddr, ws, "dev-txn-2")
	waitUntil(t, 60*time.Second, "the second transaction to be stored", stored(2, "dev-txn-1", "dev-txn-2"))
	devStop(t, dev2)
}

// devStart starts `speculapro dev` with env and its embedded broker on a
// free loopback address, and returns once it serves the engine's metrics.
// Should the test fail while dev runs, it is stopped as Ctrl-C would stop
// it: killed, dev would leave its pipelines' process running (and holding
// the output a test reads).
func devStart(t *testing.T, env map[string]string) (dev *binProcess, kafkaAddr string) {
	t.Helper()
	kafkaAddr = testenv.FreeAddr(t)
	dev = newBinProcess(t).named("dev").start(t, env, "dev", "--kafka-addr", kafkaAddr)
	t.Cleanup(func() {
		if dev.running() {
			_ = dev.cmd.Process.Signal(os.Interrupt)
			select {
			case <-dev.exited:
			case <-time.After(exitBound):
			}
		}
	})
	waitUntil(t, waitBound, "dev to serve /metrics", func() error {
		body, err := dev.scrape()
		if err == nil && !strings.Contains(body, "input_connection_up") {
			err = fmt.Errorf("no input_connection_up metric yet")
		}
		return err
	})
	return dev, kafkaAddr
}

// devStop is Ctrl-C: dev must stop its pipelines and broker, exit 0, and log
// no error on the way.
func devStop(t *testing.T, dev *binProcess) {
	t.Helper()
	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("dev exited with code %d after Ctrl-C:\n%s\n%s", code, dev.stdout, dev.stderr)
	}
	if out := dev.stdout.String() + dev.stderr.String(); strings.Contains(out, "level=ERROR") {
		t.Errorf("dev logged an error while running or stopping:\n%s", out)
	}
}

func produceTransaction(ctx context.Context, t *testing.T, broker string, ws event.UUID, externalID string) {
	t.Helper()
	at := time.Now().UTC().Truncate(time.Millisecond)
	env := event.Envelope{
		V: 1, Kind: event.KindTransaction,
		ID:          event.TransactionID(ws, externalID, at),
		WorkspaceID: ws, ExternalID: externalID, OccurredAt: at,
		CustomerExternalID: "cust-1", AccountExternalID: "acct-1",
		Type: "transfer", Amount: "12.50", Currency: "EUR", Direction: event.DirectionOut, Status: "completed",
	}
	b, err := event.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: "sp.txn.ingested", Key: []byte(fmt.Sprintf("%s:acct-1", ws)), Value: b}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatalf("producing %s: %v", externalID, err)
	}
}
