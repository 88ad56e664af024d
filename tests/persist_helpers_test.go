package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/testenv"
)

// Bounds of every wait in the persist tests; generous because the machine is
// shared.
const (
	persistWait       = 90 * time.Second
	persistExitWait   = 40 * time.Second
	persistPartitions = 3
)

// persistLogLine matches one of the spec's log lines exactly as the spec
// quotes it: `level=<LEVEL> msg="<msg>"` followed by the line's own fields
// (rows=…, count=…), upper-case level included.
func persistLogLine(level, msg string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^time=\S+ level=` + level + ` msg="` + regexp.QuoteMeta(msg) + `"( |$).*$`)
}

// persistKafka is one test's topics on the real broker.
type persistKafka struct {
	brokers []string
	prefix  string
	group   string
	client  *kgo.Client
}

// newPersistKafka creates <prefix>txn.ingested, <prefix>account.events and
// their .dlq twins with persistPartitions partitions, deleted at cleanup.
func newPersistKafka(t *testing.T) *persistKafka {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))
	k := &persistKafka{
		brokers: brokers,
		prefix:  fmt.Sprintf("t-%s-%s.", name, hex.EncodeToString(suffix)),
		group:   fmt.Sprintf("t-%s-%s", name, hex.EncodeToString(suffix)),
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	k.client = cl
	adm := kadm.NewClient(cl)
	topics := []string{k.prefix + "txn.ingested", k.prefix + "txn.ingested.dlq", k.prefix + "account.events", k.prefix + "account.events.dlq"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := adm.CreateTopics(ctx, persistPartitions, 1, nil, topics...)
	if err != nil {
		t.Fatalf("creating topics: %v", err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("creating topic %s: %v", r.Topic, r.Err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topics...)
		_, _ = adm.DeleteGroups(ctx, k.group, k.group+"-events")
		cl.Close()
	})
	return k
}

// produce writes records to <prefix>topic and waits until Kafka has them.
func (k *persistKafka) produce(t *testing.T, topic string, recs ...*kgo.Record) {
	t.Helper()
	for _, r := range recs {
		r.Topic = k.prefix + topic
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := k.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing %d records: %v", len(recs), err)
	}
}

// consumeAll reads <prefix>topic from the start until want records arrived
// (or persistWait passed) and returns them.
func (k *persistKafka) consumeAll(t *testing.T, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumeTopics(k.prefix+topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	deadline := time.Now().Add(persistWait)
	for len(got) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		f := cl.PollFetches(ctx)
		cancel()
		f.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	// Anything more that arrives in a moment would be a duplicate.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	cancel()
	return got
}

// committedOffsets is the sum of the group's committed offsets on topic
// (0 when it committed nothing).
func (k *persistKafka) committedOffsets(t *testing.T, group string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(k.client).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetching offsets of %s: %v", group, err)
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At > 0 {
			sum += o.At
		}
	})
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

// waitCount polls a count query until it reaches want (or persistWait).
func waitCount(t *testing.T, conn *pgx.Conn, want int, query string, args ...any) int {
	t.Helper()
	deadline := time.Now().Add(persistWait)
	n := -1
	for time.Now().Before(deadline) {
		if n = persistCount(t, conn, query, args...); n >= want {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
	return n
}

type persistSyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *persistSyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *persistSyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// persistProcess is one running speculapro.
type persistProcess struct {
	cmd      *exec.Cmd
	stdout   *persistSyncBuffer
	stderr   *persistSyncBuffer
	exited   chan struct{}
	httpAddr string
}

// newPersistProcess is a process not yet started, with its HTTP address.
func newPersistProcess(t *testing.T) *persistProcess {
	return &persistProcess{stdout: &persistSyncBuffer{}, stderr: &persistSyncBuffer{}, exited: make(chan struct{}), httpAddr: testenv.FreeAddr(t)}
}

// start runs the real binary with args (relative pipeline paths are
// resolved against the repository) and env on top of a clean SP_*-free
// environment; cleanup kills it if the test did not stop it.
func (p *persistProcess) start(t *testing.T, env map[string]string, args ...string) *persistProcess {
	t.Helper()
	bin := testenv.Binary(t)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = testenv.RepoRoot(t)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SP_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, "SP_HTTP_ADDR="+p.httpAddr)
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting speculapro: %v", err)
	}
	// The waiter owns cmd.Wait and ends with the process, which cleanup
	// forces with a kill if the test did not stop it.
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("speculapro stdout:\n%s\nstderr:\n%s", p.stdout, p.stderr)
		}
	})
	return p
}

// runArgs runs pipeline as `speculapro run`, with the HTTP server on the
// process's loopback address (a pipeline file carries no http section).
func (p *persistProcess) runArgs(pipeline string) []string {
	return []string{"run", "--set", "http.address=" + p.httpAddr, pipeline}
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

// waitExit waits for the process to end and returns its exit code.
func (p *persistProcess) waitExit(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(within):
		t.Fatalf("speculapro still running after %s", within)
	}
	return p.cmd.ProcessState.ExitCode()
}

// stop sends SIGTERM and returns the exit code.
func (p *persistProcess) stop(t *testing.T) int {
	t.Helper()
	return p.signal(t, syscall.SIGTERM)
}

// interrupt sends SIGINT, as Ctrl-C would, and returns the exit code.
func (p *persistProcess) interrupt(t *testing.T) int {
	t.Helper()
	return p.signal(t, syscall.SIGINT)
}

func (p *persistProcess) signal(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("sending %v: %v", sig, err)
	}
	return p.waitExit(t, persistExitWait)
}

// scrape fetches /metrics; an error means not (or no longer) served.
func (p *persistProcess) scrape() (string, error) {
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/metrics: %d %v", resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return "", fmt.Errorf("/metrics content type %q, want Prometheus text", ct)
	}
	return string(body), nil
}

// metricSum adds up every sample of metric (any labels) in a scrape.
func metricSum(scrape, metric string) float64 {
	var sum float64
	for _, line := range strings.Split(scrape, "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

// repoPath is a path inside the repository.
func repoPath(t *testing.T, rel string) string {
	return filepath.Join(testenv.RepoRoot(t), rel)
}
