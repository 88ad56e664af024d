package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/kafkatopics"
)

// The decision tests run the real binary: the decision role in one process
// (pipelines/decision.yaml), the persister in another (pipelines/persist.yaml),
// against real Kafka (a private broker where a test stops it), real Redis
// (a private one where a test stops it) and a fresh PostgreSQL database.

const decisionPipeline = "pipelines/decision.yaml"

// Real-time rules of every decision test: a review rule that needs the
// running totals to include the transaction itself (the third payment out of
// an account within the hour), and a decline rule on the amount alone.
var decisionRules = []struct{ name, expr, action, score string }{
	{"d_velocity_out", `event.direction == "out" && features.account.out_count_1h >= 3`, "review", "40"},
	{"d_huge_amount", `event.amount >= 9000`, "decline", "90"},
	// An alert-only rule: the stream's, never part of a decision.
	{"d_alert_only", `event.amount >= 1`, "alert", "5"},
}

// decisionStack is one decision test's Kafka topics, database, workspace,
// key and Redis prefixes.
type decisionStack struct {
	brokers     []string
	kcl         *kgo.Client
	prefix      string // topic prefix
	group       string // SP_PERSIST_GROUP
	db          *dbtest.DB
	super       *pgx.Conn
	ws          event.UUID
	key         string
	redisURL    string
	keyPrefix   string // SP_REDIS_KEY_PREFIX
	spoolPrefix string // SP_DECISION_SPOOL_PREFIX
	redis       redis.UniversalClient
	addr        string // SP_DECISION_ADDR
	pipeline    string // the decision pipeline file run
	// accounts and payees spread sendAtRate's transactions
	// (decisionTxnOver); 40 and 13 unless a test sets them.
	accounts, payees int
}

// newDecisionStack creates the topics on brokers, the database with a
// workspace, a key, the rules and a webhook endpoint taking decision.created.
// maxWait, when set, shortens redis_spool's 30 s wait (a copy of the
// pipeline with only that changed) so a modest run still parks.
func newDecisionStack(t testing.TB, name string, brokers []string, redisURL, maxWait string) *decisionStack {
	t.Helper()
	unique := uniqueName(t, name)
	s := &decisionStack{
		brokers: brokers, prefix: unique + ".", group: unique + "-persist", db: dbtest.New(t),
		redisURL: redisURL, keyPrefix: unique + ":", spoolPrefix: unique + ":", addr: testenv.FreeAddr(t),
		pipeline: decisionPipeline, accounts: 40, payees: 13,
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	s.kcl = cl
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topics := kafkatopics.Names(s.prefix)
	if _, err := adm.CreateTopics(ctx, 3, -1, nil, topics...); err != nil {
		t.Fatalf("creating topics: %v", err)
	}
	waitServed(t, adm, 3, topics...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topics...)
		_, _ = adm.DeleteGroups(ctx, s.group)
		cl.Close()
	})
	s.super = s.db.Connect(t, s.db.SuperuserURL)
	s.ws, s.key = ingestWorkspace(t, s.db.AppURL)
	for _, r := range decisionRules {
		if _, err := s.super.Exec(context.Background(), `
INSERT INTO speculapro.rules (workspace_id, name, description, applies_to, expression, severity, action, alert, score)
VALUES ($1, $2, 'decision test', 'transaction', $3, 'high', $4, false, $5)`, s.ws, r.name, r.expr, r.action, r.score); err != nil {
			t.Fatalf("inserting rule %s: %v", r.name, err)
		}
	}
	if _, err := s.super.Exec(context.Background(), `
INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted, event_types)
VALUES ($1, 'https://example.invalid/hook', '\x00', '{decision.created}')`, s.ws); err != nil {
		t.Fatalf("inserting a webhook endpoint: %v", err)
	}
	rc, err := redisOpen(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	s.redis = rc
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, p := range []string{s.keyPrefix, s.spoolPrefix} {
			if keys, err := rc.Keys(ctx, p+"*").Result(); err == nil && len(keys) > 0 {
				for _, k := range keys {
					rc.Del(ctx, k)
				}
			}
		}
		rc.Close()
	})
	if maxWait != "" {
		b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), decisionPipeline))
		if err != nil {
			t.Fatal(err)
		}
		out := strings.Replace(string(b), "  redis_spool:\n", "  redis_spool:\n    max_wait: "+maxWait+"\n", 1)
		if out == string(b) {
			t.Fatal("decision.yaml has no redis_spool output")
		}
		s.pipeline = filepath.Join(t.TempDir(), "decision.yaml")
		if err := os.WriteFile(s.pipeline, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func redisOpen(url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.MaxRetries = -1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = time.Second, time.Second, time.Second
	return redis.NewClient(opt), nil
}

// env is the environment of the decision and persist processes.
func (s *decisionStack) env(extra map[string]string) map[string]string {
	enc, fp := identity.DevKeys()
	env := map[string]string{
		"SP_KAFKA_BROKERS":         strings.Join(s.brokers, ","),
		"SP_KAFKA_TOPIC_PREFIX":    s.prefix,
		"SP_PERSIST_GROUP":         s.group,
		"SP_DB_URL":                s.db.AppURL,
		"SP_DB_SYSTEM_URL":         s.db.SystemURL,
		"SP_REDIS_URL":             s.redisURL,
		"SP_REDIS_KEY_PREFIX":      s.keyPrefix,
		"SP_DECISION_SPOOL_PREFIX": s.spoolPrefix,
		"SP_DECISION_ADDR":         s.addr,
		"SP_ENCRYPTION_KEY":        enc,
		"SP_FINGERPRINT_KEY":       fp,
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startDecision runs the decision role (args go before the pipeline, e.g.
// --set http.debug_endpoints=true) and waits until it answers /healthz and
// has loaded its rules (/readyz).
func (s *decisionStack) startDecision(t testing.TB, name string, extra map[string]string, args ...string) *binProcess {
	t.Helper()
	all := append(append([]string{"streams", "-o", "config/observability.yaml"}, args...), s.pipeline)
	p := newBinProcess(t).named(name).start(t, s.env(extra), all...)
	if !poll(waitBound, 200*time.Millisecond, func() bool {
		if !p.running() {
			t.Fatalf("%s exited before it was ready", name)
		}
		resp, err := http.Get("http://" + s.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("decision API at %s not ready within %v", s.addr, waitBound)
	}
	return p
}

// startPersist runs the persister on the stack.
func (s *decisionStack) startPersist(t testing.TB) *binProcess {
	t.Helper()
	return newBinProcess(t).named("persist").start(t, s.env(nil), "streams", "-o", "config/observability.yaml", "pipelines/persist.yaml")
}

// spoolLen is the length of the stack's spool list.
func (s *decisionStack) spoolLen(t testing.TB) int64 {
	t.Helper()
	n, err := s.redis.LLen(context.Background(), s.spoolPrefix+"spool:{decisions}").Result()
	if err != nil {
		t.Fatalf("LLEN of the spool: %v", err)
	}
	return n
}

// decisionTxn is transaction n of a test: accounts see several payments
// each, so the velocity rule fires; every 97th is over the decline limit.
func decisionTxn(run string, n int, at time.Time) map[string]any {
	return decisionTxnOver(run, n, at, 40, 13)
}

// decisionTxnOver is decisionTxn spread over accounts accounts (each with
// its customer) and payees counterparties.
func decisionTxnOver(run string, n int, at time.Time, accounts, payees int) map[string]any {
	amount := fmt.Sprintf("%d.%02d", 10+n%500, n%100)
	if n%97 == 5 {
		amount = "9500.00"
	}
	return map[string]any{
		"external_id":          fmt.Sprintf("%s-%06d", run, n),
		"occurred_at":          at.Format(time.RFC3339Nano),
		"account_external_id":  fmt.Sprintf("%s-acc-%d", run, n%accounts),
		"customer_external_id": fmt.Sprintf("%s-cust-%d", run, n%accounts),
		"amount":               amount,
		"currency":             "EUR",
		"direction":            []string{"out", "out", "in"}[n%3],
		"counterparty":         map[string]any{"name": fmt.Sprintf("Payee %d", n%payees)},
	}
}

// decisionAnswer is a decision as answered (the fields the tests read).
type decisionAnswer struct {
	ID         string  `json:"id"`
	ExternalID string  `json:"external_id"`
	Decision   string  `json:"decision"`
	Score      float64 `json:"score"`
	Degraded   bool    `json:"degraded"`
	Reason     string  `json:"degraded_reason"`
	Repeated   bool    `json:"repeated"`
	Rules      []struct {
		Rule    string `json:"rule"`
		Version int    `json:"version"`
	} `json:"rules"`
	Error  string `json:"error"`
	Errors []struct {
		Field, Message string
	} `json:"errors"`
}

var decisionHTTP = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute},
}

// postDecision sends one body with key and returns the status and answer.
func postDecision(base, key string, body []byte) (int, decisionAnswer, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/decisions", bytes.NewReader(body))
	if err != nil {
		return 0, decisionAnswer{}, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := decisionHTTP.Do(req)
	if err != nil {
		return 0, decisionAnswer{}, err
	}
	return readDecisionAnswer(resp)
}

// readDecisionAnswer reads and closes an answer of the decision API.
func readDecisionAnswer(resp *http.Response) (int, decisionAnswer, error) {
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a decisionAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return resp.StatusCode, a, fmt.Errorf("answer %d is not JSON: %.200s", resp.StatusCode, raw)
	}
	return resp.StatusCode, a, nil
}

// decisionRun is what a fixed-rate client sent and got.
type decisionRun struct {
	mu        sync.Mutex
	answers   map[string]decisionAnswer // external_id → decision, status 200 only
	failures  []string
	latencies []time.Duration // from each request's scheduled time
}

// sendAtRate sends transactions from..to-1 of run at rate per second, each
// at its scheduled time (start + i/rate, whatever earlier answers took: no
// coordinated omission), and records every answer with its latency from
// the scheduled time.
func (s *decisionStack) sendAtRate(run string, from, to int, rate float64, into *decisionRun) {
	base := "http://" + s.addr
	start := time.Now()
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		at := start.Add(time.Duration(float64(i-from) / rate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		body, _ := json.Marshal(decisionTxnOver(run, i, time.Now().UTC(), s.accounts, s.payees))
		wg.Add(1)
		go func(i int, at time.Time) {
			defer wg.Done()
			code, a, err := postDecision(base, s.key, body)
			lat := time.Since(at)
			into.mu.Lock()
			defer into.mu.Unlock()
			into.latencies = append(into.latencies, lat)
			switch {
			case err != nil:
				into.failures = append(into.failures, fmt.Sprintf("%s-%06d: %v", run, i, err))
			case code != http.StatusOK:
				into.failures = append(into.failures, fmt.Sprintf("%s-%06d: status %d %s", run, i, code, a.Error))
			default:
				into.answers[a.ExternalID] = a
			}
		}(i, at)
	}
	wg.Wait()
}

func newDecisionRun() *decisionRun { return &decisionRun{answers: map[string]decisionAnswer{}} }

// quantile of the recorded latencies (q in 0..1).
func (r *decisionRun) quantile(q float64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return quantileOf(r.latencies, q)
}

func quantileOf(ls []time.Duration, q float64) time.Duration {
	if len(ls) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ls...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q * float64(len(s)))
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

// storedDecision is a transaction row's decision and its decisions row.
type storedDecision struct {
	txns      int    // transaction rows of the external_id
	decision  string // transactions.decision
	decisions int    // decisions rows
	outcome   string // decisions.decision
}

// stored reads every stored transaction of the workspace with its decision.
func (s *decisionStack) stored(t testing.TB) map[string]*storedDecision {
	t.Helper()
	out := map[string]*storedDecision{}
	// each hands add the storedDecision of every row query returns (an
	// external_id and a decision of the workspace).
	each := func(query string, add func(sd *storedDecision, decision string)) {
		t.Helper()
		rows, err := s.super.Query(context.Background(), query, s.ws)
		if err != nil {
			t.Fatal(err)
		}
		var ext, d string
		if _, err := pgx.ForEachRow(rows, []any{&ext, &d}, func() error {
			sd := out[ext]
			if sd == nil {
				sd = &storedDecision{}
				out[ext] = sd
			}
			add(sd, d)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	each(`SELECT external_id, coalesce(decision, '') FROM speculapro.transactions WHERE workspace_id = $1`,
		func(sd *storedDecision, d string) { sd.txns++; sd.decision = d })
	each(`SELECT external_id, decision FROM speculapro.decisions WHERE workspace_id = $1`,
		func(sd *storedDecision, d string) { sd.decisions++; sd.outcome = d })
	return out
}

// waitStored waits until want transactions of the workspace are stored.
func (s *decisionStack) waitStored(t testing.TB, want int, within time.Duration) int {
	t.Helper()
	n := -1
	poll(within, 500*time.Millisecond, func() bool {
		if err := s.super.QueryRow(context.Background(), `SELECT count(*) FROM speculapro.decisions WHERE workspace_id = $1`, s.ws).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n >= want
	})
	return n
}

// checkStoredOnce: every answered decision is stored exactly once, on its
// transaction row and in a decisions row, with the outcome answered; lost
// names those the test expects to be absent (LOST lines); nothing else is
// stored. It returns the problems found.
func (s *decisionStack) checkStoredOnce(t testing.TB, answers map[string]decisionAnswer, lost map[string]bool) []string {
	t.Helper()
	got := s.stored(t)
	var bad []string
	for ext, a := range answers {
		sd := got[ext]
		switch {
		case lost[ext] && sd == nil:
		case lost[ext]:
			bad = append(bad, fmt.Sprintf("%s: logged LOST but stored", ext))
		case sd == nil:
			bad = append(bad, fmt.Sprintf("%s: answered %s, not stored", ext, a.Decision))
		case sd.txns != 1 || sd.decisions != 1:
			bad = append(bad, fmt.Sprintf("%s: %d transaction rows, %d decisions rows", ext, sd.txns, sd.decisions))
		case sd.decision != a.Decision || sd.outcome != a.Decision:
			bad = append(bad, fmt.Sprintf("%s: answered %s, stored %q / %q", ext, a.Decision, sd.decision, sd.outcome))
		}
	}
	for ext := range got {
		if _, ok := answers[ext]; !ok {
			bad = append(bad, fmt.Sprintf("%s: stored but never answered", ext))
		}
	}
	var hooks, decs int
	_ = s.super.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT event_id) FROM speculapro.webhook_deliveries WHERE workspace_id = $1 AND event_type = 'decision.created'`, s.ws).Scan(&hooks, &decs)
	if want := len(answers) - len(lost); hooks != want || decs != want {
		bad = append(bad, fmt.Sprintf("decision.created deliveries: %d (%d distinct), want %d", hooks, decs, want))
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		// Where the missing ones are: on the topic (then the persister
		// did not store them) or not (then the decision role lost them).
		onTopic := s.externalIDsOnTopic(t, 5*time.Second)
		missing, there := 0, 0
		for ext := range answers {
			if got[ext] == nil && !lost[ext] {
				missing++
				if onTopic[ext] > 0 {
					there++
				}
			}
		}
		dup := 0
		for _, c := range onTopic {
			if c > 1 {
				dup++
			}
		}
		bad = append([]string{fmt.Sprintf("diagnosis: %d answered but not stored, %d of them on the topic; %d records on the topic, %d external_ids there more than once", missing, there, len(onTopic), dup)}, bad...)
	}
	if len(bad) > 10 {
		bad = append(bad[:10], fmt.Sprintf("… and %d more", len(bad)-10))
	}
	return bad
}

var lostLine = regexp.MustCompile(`msg="decision: event LOST" workspace=(\S+) external_id=(\S+)`)

// lostIn returns the external_ids of the LOST lines in a process's output.
func lostIn(out string) map[string]bool {
	lost := map[string]bool{}
	for _, m := range lostLine.FindAllStringSubmatch(out, -1) {
		lost[strings.Trim(m[2], `"`)] = true
	}
	return lost
}

// metricOf scrapes one metric's sum from p.
func metricOf(t testing.TB, p *binProcess, metric string, labels ...string) float64 {
	t.Helper()
	body, err := p.scrape()
	if err != nil {
		t.Fatalf("scraping %s: %v", p.name, err)
	}
	return metricSum(body, metric, labels...)
}

// txnReader is a client reading the stack's txn.ingested from the start.
func (s *decisionStack) txnReader(t testing.TB) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...), kgo.ConsumeTopics(s.prefix+"txn.ingested"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// consumeFor counts the records on the stack's txn.ingested within d.
func consumeFor(t testing.TB, s *decisionStack, d time.Duration) int {
	t.Helper()
	cl := s.txnReader(t)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	n := 0
	for ctx.Err() == nil {
		n += cl.PollFetches(ctx).NumRecords()
	}
	return n
}

// externalIDsOnTopic counts the records of each external_id on the stack's
// txn.ingested.
func (s *decisionStack) externalIDsOnTopic(t testing.TB, idle time.Duration) map[string]int {
	t.Helper()
	cl := s.txnReader(t)
	defer cl.Close()
	out := map[string]int{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), idle)
		f := cl.PollFetches(ctx)
		cancel()
		if f.NumRecords() == 0 {
			return out
		}
		f.EachRecord(func(r *kgo.Record) {
			var e struct {
				ExternalID string `json:"external_id"`
			}
			_ = json.Unmarshal(r.Value, &e)
			out[e.ExternalID]++
		})
	}
}
