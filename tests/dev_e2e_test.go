package tests

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/testenv"
)

// `speculapro dev` is what `make run` starts: with no SP_KAFKA_BROKERS it runs
// an embedded broker, migrates, creates the topics and runs every pipeline.
// A transaction produced to the embedded broker must reach PostgreSQL, /metrics
// must serve engine metrics, Ctrl-C must stop it with exit 0, and a second
// start on the same data folder must find its topics (and records) kept.
func TestDevRunsWholePipelineWithEmbeddedBroker(t *testing.T) {
	bin := testenv.Binary(t)
	db := dbtest.NewBootstrapped(t)
	dataDir := t.TempDir()
	kafkaAddr := testenv.FreeAddr(t)
	httpAddr := testenv.FreeAddr(t)

	env := devEnv(db, dataDir, httpAddr)
	out := startDev(t, bin, env, kafkaAddr)
	waitFor(t, 90*time.Second, "dev to serve /metrics", func() bool {
		body, err := httpGet("http://" + httpAddr + "/metrics")
		return err == nil && strings.Contains(body, "input_connection_up")
	})
	for _, want := range []string{"created sp.txn.ingested", "created sp.account.events.dlq", "embedded Kafka broker on " + kafkaAddr} {
		if !out.contains(want) {
			t.Errorf("dev output lacks %q:\n%s", want, out.String())
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws := event.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	conn, err := pgx.Connect(ctx, db.SystemURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'dev test')`, ws); err != nil {
		t.Fatalf("creating workspace: %v", err)
	}
	produceTransaction(ctx, t, kafkaAddr, ws, "dev-txn-1")
	waitFor(t, 60*time.Second, "the transaction to be stored", func() bool {
		var n int
		_ = conn.QueryRow(ctx, `SELECT count(*) FROM transactions WHERE external_id = 'dev-txn-1'`).Scan(&n)
		return n == 1
	})

	out.stop(t)

	// Second start on the same folder: the topics survived, so none is created.
	out = startDev(t, bin, env, kafkaAddr)
	waitFor(t, 90*time.Second, "dev to serve /metrics again", func() bool {
		_, err := httpGet("http://" + httpAddr + "/metrics")
		return err == nil
	})
	if out.contains("created sp.") {
		t.Errorf("second dev start created topics again; the embedded broker lost its data:\n%s", out.String())
	}
	produceTransaction(ctx, t, kafkaAddr, ws, "dev-txn-2")
	waitFor(t, 60*time.Second, "the second transaction to be stored", func() bool {
		var n int
		_ = conn.QueryRow(ctx, `SELECT count(*) FROM transactions WHERE external_id IN ('dev-txn-1', 'dev-txn-2')`).Scan(&n)
		return n == 2
	})
	out.stop(t)
}

func devEnv(db *dbtest.DB, dataDir, httpAddr string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SP_") || strings.HasPrefix(kv, "SP_TEST_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"SP_DB_SUPERUSER_URL="+strings.Replace(db.SuperuserURL, "/"+db.Name, "/postgres", 1),
		"SP_DB_OWNER_URL="+db.OwnerURL,
		"SP_DB_URL="+db.AppURL,
		"SP_DB_SYSTEM_URL="+db.SystemURL,
		"SP_DATA_DIR="+dataDir,
		"SP_HTTP_ADDR="+httpAddr,
		"SP_PERSIST_GROUP=dev-e2e",
	)
}

type devProcess struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	buf  strings.Builder
	done chan error
}

func startDev(t *testing.T, bin string, env []string, kafkaAddr string) *devProcess {
	t.Helper()
	p := &devProcess{done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "dev", "--kafka-addr", kafkaAddr)
	p.cmd.Dir = testenv.RepoRoot(t)
	p.cmd.Env = env
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.buf.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	go func() { err := p.cmd.Wait(); w.Close(); p.done <- err }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
	})
	return p
}

func (p *devProcess) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

func (p *devProcess) contains(s string) bool { return strings.Contains(p.String(), s) }

// stop is Ctrl-C: dev must stop its pipelines and broker and exit 0.
func (p *devProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("dev exited with %v after Ctrl-C:\n%s", err, p.String())
		}
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Fatalf("dev did not stop within 60s of Ctrl-C:\n%s", p.String())
	}
	if strings.Contains(p.String(), "level=error") || strings.Contains(p.String(), "level=ERROR") {
		t.Errorf("dev logged an error while stopping:\n%s", p.String())
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

func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
