package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/testenv"
)

const (
	ingestBenchBatch   = 500 // items per request, as the issue asks
	ingestBenchClients = 4   // requests in flight at once
)

// BenchmarkIngestThroughput measures the real ingest API (speculapro run
// pipelines/ingest.yaml against the local broker): accepted transactions per
// second with 500-item requests from 4 concurrent clients, and the request
// latency p50/p99, beside a baseline measured in the same run: the same
// records (as the pipeline writes them: envelopes with protected
// identifiers, same keys) produced by franz-go straight to the broker with
// the same acks=all idempotent settings. Reports txn/s, broker-txn/s and the
// ratio ingest/broker. 50,000 transactions, 500,000 with SP_TEST_SCALE=full.
func BenchmarkIngestThroughput(b *testing.B) {
	n := 50000
	if os.Getenv("SP_TEST_SCALE") == "full" {
		n = 500000
	}
	brokers := testenv.KafkaBrokers(b)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	prefix := "t-ingest-bench-" + hex.EncodeToString(suffix) + "."
	topics := []string{prefix + "txn.ingested", prefix + "account.events", prefix + "baseline"}
	benchTopics(b, brokers, topics)

	db := dbtest.New(b)
	ws, key := ingestWorkspace(b, db.AppURL)
	addr := testenv.FreeAddr(b)
	base := "http://" + addr
	httpAddr := testenv.FreeAddr(b)
	stop := benchStartIngest(b, brokers, prefix, db, addr, httpAddr)
	defer stop()

	at := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	bodies := make([][]byte, 0, n/ingestBenchBatch)
	for start := 0; start < n; start += ingestBenchBatch {
		items := make([]map[string]any, 0, ingestBenchBatch)
		for i := start; i < min(start+ingestBenchBatch, n); i++ {
			items = append(items, ingestTxn(i, at))
		}
		bodies = append(bodies, ingestBody(b, items...))
	}
	baseline := benchBaselineRecords(b, ws, n, at, prefix+"baseline")

	b.ResetTimer()
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: ingestBenchClients}}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		accepted  int
		failures  []string
		wg        sync.WaitGroup
	)
	// SP_TEST_BENCH_CPUPROFILE=<file> saves a 3 s CPU profile of the ingest
	// process under load (http.debug_endpoints is on for the benchmark).
	var profiled sync.WaitGroup
	if path := os.Getenv("SP_TEST_BENCH_CPUPROFILE"); path != "" {
		profiled.Add(1)
		// The fetch owns only its response; it ends after 3 s of profile.
		go func() {
			defer profiled.Done()
			benchIngestProfile(b, httpAddr, path)
		}()
	}
	next := make(chan []byte)
	start := time.Now()
	for range ingestBenchClients {
		wg.Add(1)
		// Each client owns its requests; it ends when next is closed.
		go func() {
			defer wg.Done()
			for body := range next {
				t0 := time.Now()
				code, ans := ingestPost(b, client, base, key, "/v1/transactions", body)
				d := time.Since(t0)
				mu.Lock()
				latencies = append(latencies, d)
				accepted += ans.Accepted
				if code != http.StatusOK || ans.Accepted != ingestBenchBatch {
					failures = append(failures, fmt.Sprintf("%d: accepted %d retry %d rejected %d %s", code, ans.Accepted, ans.Retry, ans.Rejected, ans.Error))
				}
				mu.Unlock()
			}
		}()
	}
	for _, body := range bodies {
		next <- body
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	profiled.Wait()
	if len(failures) > 0 {
		b.Fatalf("%d of %d requests not fully accepted, first: %s", len(failures), len(bodies), failures[0])
	}

	brokerRate := benchProduceBaseline(b, brokers, baseline)
	rate := float64(accepted) / elapsed.Seconds()
	slices.Sort(latencies)
	p50 := latencies[len(latencies)/2]
	p99 := latencies[min(len(latencies)-1, len(latencies)*99/100)]
	b.ReportMetric(rate, "txn/s")
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(brokerRate, "broker-txn/s")
	b.ReportMetric(rate/brokerRate, "ingest/broker")
	b.Logf("%d transactions in %d requests of %d, %d clients: %s, %.0f txn/s, latency p50 %v p99 %v; franz-go straight to the broker: %.0f txn/s; ratio %.2f",
		accepted, len(bodies), ingestBenchBatch, ingestBenchClients, elapsed.Round(time.Millisecond), rate,
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), brokerRate, rate/brokerRate)
}

// benchTopics creates the benchmark's topics (deleted at cleanup).
func benchTopics(b *testing.B, brokers, topics []string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		b.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := adm.CreateTopics(ctx, 6, 1, nil, topics...)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			b.Fatalf("creating %s: %v", r.Topic, r.Err)
		}
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topics...)
		cl.Close()
	})
}

// benchStartIngest runs `speculapro run pipelines/ingest.yaml` and waits
// until it is ready; the returned func stops it.
func benchStartIngest(b *testing.B, brokers []string, prefix string, db *dbtest.DB, addr, httpAddr string) func() {
	cmd := exec.Command(testenv.Binary(b), "run", "--set", "http.address="+httpAddr, "--set", "http.debug_endpoints=true", "pipelines/ingest.yaml")
	cmd.Dir = testenv.RepoRoot(b)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range ingestEnv(brokers, prefix, "unused", db, addr) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := &persistSyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	// The waiter owns cmd.Wait and ends with the process.
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		select {
		case <-exited:
			return
		default:
		}
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	deadline := time.Now().Add(persistWait)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop
			}
		}
		select {
		case <-exited:
			b.Fatalf("speculapro exited:\n%s", out)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			b.Fatalf("ingest API not ready:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// benchBaselineRecords are the benchmark's transactions as the pipeline
// writes them: envelopes with protected identifiers, keyed by account.
func benchBaselineRecords(b *testing.B, ws event.UUID, n int, at time.Time, topic string) []*kgo.Record {
	enc, fp := identity.DevKeys()
	prot, err := identity.NewProtector(enc, fp)
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]*kgo.Record, n)
	for i := range n {
		it := ingestTxn(i, at)
		occurred, _ := time.Parse(time.RFC3339Nano, it["occurred_at"].(string))
		e := event.Envelope{
			V: event.Version, Kind: event.KindTransaction, WorkspaceID: ws, ExternalID: it["external_id"].(string),
			OccurredAt: occurred, ReceivedAt: time.Now().UTC(), AccountExternalID: it["account_external_id"].(string),
			CustomerExternalID: it["customer_external_id"].(string), Amount: it["amount"].(string), Currency: "EUR",
			Direction: event.Direction(it["direction"].(string)),
		}
		e.ID = event.TransactionID(ws, e.ExternalID, e.OccurredAt)
		cp := it["counterparty"].(map[string]any)
		e.Counterparty = &event.Counterparty{Name: cp["name"].(string)}
		if id, ok := cp["identifier"].(string); ok {
			p, err := prot.Protect(identity.Kind(cp["identifier_kind"].(string)), id)
			if err != nil {
				b.Fatal(err)
			}
			e.Counterparty.IdentifierKind, e.Counterparty.IdentifierEnc = string(p.Kind), p.Enc
			e.Counterparty.IdentifierMasked, e.Counterparty.IdentifierFP = p.Masked, p.FP
		}
		e.Counterparty.Fingerprint = prot.Fingerprints.Counterparty(e.Counterparty.IdentifierFP, e.Counterparty.Name)
		v, err := event.Encode(e)
		if err != nil {
			b.Fatal(err)
		}
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(ws.String() + ":" + e.AccountExternalID), Value: v}
	}
	return recs
}

// benchProduceBaseline produces recs with franz-go (acks=all, idempotent:
// its defaults), as fast as the client pipelines them, and returns
// records per second.
func benchProduceBaseline(b *testing.B, brokers []string, recs []*kgo.Record) float64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.Fatalf("baseline produce: %v", err)
	}
	return float64(len(recs)) / time.Since(start).Seconds()
}

// benchIngestProfile saves a 3 s CPU profile of the ingest process.
func benchIngestProfile(b *testing.B, httpAddr, path string) {
	client := http.Client{Timeout: time.Minute}
	resp, err := client.Get("http://" + httpAddr + "/debug/pprof/profile?seconds=3")
	if err != nil {
		b.Logf("CPU profile: %v", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Logf("CPU profile: status %d, %v", resp.StatusCode, err)
		return
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Logf("CPU profile: %v", err)
		return
	}
	b.Logf("CPU profile of 3 s of the ingest process saved to %s (go tool pprof -top %s)", path, path)
}
