package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/kafkatopics"
)

// failoverLoad is the ingest load of TestKafkaClusterFailover: clients
// posting batches of ten transactions, each client pausing between its
// requests, until items are used up or the test stops them.
type failoverLoad struct {
	base, key string
	at        time.Time
	client    *http.Client

	mu       sync.Mutex
	next     int               // the next item number to send
	limit    int               // items at most
	answered map[int]string    // item → its last answer (accepted, duplicate, retry, rejected, error)
	ids      map[int]string    // item → the id an accepted or duplicate answer gave it
	requests []failoverRequest // every request, in the order answered
	stop     chan struct{}
	done     sync.WaitGroup
	fails    []string // protocol faults, reported by the test goroutine
}

// failoverRequest is one answered request: when it was sent and answered,
// and what its items were answered.
type failoverRequest struct {
	sent, answered time.Time
	items          []int
	status         []string
}

// post sends items and records their answers; an answer that is not a
// 200 with one result per item counts each item as retry (the client
// sends it again), which is what the API's 503s ask of a client.
func (l *failoverLoad) post(items []int) failoverRequest {
	body := make([]map[string]any, len(items))
	for i, n := range items {
		body[i] = ingestTxn(n, l.at)
	}
	raw, _ := json.Marshal(map[string]any{"items": body})
	r := failoverRequest{sent: time.Now(), items: items, status: make([]string, len(items))}
	for i := range r.status {
		r.status[i] = "retry"
	}
	req, _ := http.NewRequest(http.MethodPost, l.base+"/v1/transactions", bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+l.key)
	req.Header.Set("Content-Type", "application/json")
	var ans ingestAnswer
	resp, err := l.client.Do(req)
	if err == nil {
		if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&ans) == nil && len(ans.Results) == len(items) {
			for _, res := range ans.Results {
				r.status[res.Index] = res.Status
			}
		}
		resp.Body.Close()
	}
	r.answered = time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, n := range items {
		l.answered[n] = r.status[i]
		if r.status[i] == "accepted" || r.status[i] == "duplicate" {
			id := ans.Results[i].ID
			if prev, ok := l.ids[n]; ok && prev != id {
				l.fails = append(l.fails, fmt.Sprintf("item %d answered id %s, earlier %s", n, id, prev))
			}
			l.ids[n] = id
		}
		if r.status[i] == "rejected" {
			l.fails = append(l.fails, fmt.Sprintf("item %d rejected: %+v", n, ans.Results[i]))
		}
	}
	l.requests = append(l.requests, r)
	return r
}

// run starts clients posting until stop is closed or items run out.
func (l *failoverLoad) run(clients int, pause time.Duration) {
	for range clients {
		l.done.Add(1)
		// Each client owns nothing but its loop; stop or the item limit ends it.
		go func() {
			defer l.done.Done()
			for {
				l.mu.Lock()
				from := l.next
				to := min(from+10, l.limit)
				l.next = to
				l.mu.Unlock()
				if from >= to {
					return
				}
				items := make([]int, 0, to-from)
				for n := from; n < to; n++ {
					items = append(items, n)
				}
				l.post(items)
				select {
				case <-l.stop:
					return
				case <-time.After(pause):
				}
			}
		}()
	}
}

// firstAcceptedAfter is the first request sent after since that had an item
// accepted: the item and when it was answered.
func (l *failoverLoad) firstAcceptedAfter(since time.Time) (int, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.requests {
		if !r.sent.After(since) {
			continue
		}
		for i, s := range r.status {
			if s == "accepted" {
				return r.items[i], r.answered, true
			}
		}
	}
	return 0, time.Time{}, false
}

// take reserves the next n item numbers, for a request outside the
// clients' loops.
func (l *failoverLoad) take(n int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	items := make([]int, 0, n)
	for ; n > 0; n-- {
		items = append(items, l.next)
		l.next++
	}
	return items
}

// sent is how many item numbers have been handed out: items 0 to sent-1.
func (l *failoverLoad) sent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

func (l *failoverLoad) countStatus(status string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.answered {
		if s == status {
			n++
		}
	}
	return n
}

// kafkaFailoverSize is how big TestKafkaClusterFailover runs: the load's
// clients and their pause between requests (which set how many items the
// run sends), how long one broker hangs and how long two do.
type kafkaFailoverSize struct {
	clients       int
	pause         time.Duration
	hang, twoHang time.Duration
}

// kafkaFailoverSizes: make chaos (SP_TEST_SCALE=full) hangs a broker for
// 20 s; the modest size (a plain go test) for 12 s, still past
// broker.session.timeout.ms (9 s), so the hung broker is fenced in both. Two brokers hang longer than a second and the ingest
// API's 10 s answer, so a request sent a second after they stop is answered
// while they are.
func kafkaFailoverSizes() kafkaFailoverSize {
	if fullScale() {
		return kafkaFailoverSize{clients: 4, pause: 150 * time.Millisecond, hang: 20 * time.Second, twoHang: 15 * time.Second}
	}
	return kafkaFailoverSize{clients: 2, pause: 250 * time.Millisecond, hang: 12 * time.Second, twoHang: 14 * time.Second}
}

// kafkaFailover is one run of TestKafkaClusterFailover: the cluster, the
// database, the processes and the load.
type kafkaFailover struct {
	size        kafkaFailoverSize
	cluster     *testenv.PrivateKafkaCluster
	adm         *kadm.Client
	topic       string
	ws          event.UUID
	super       *pgx.Conn
	api, stream *binProcess
	load        *failoverLoad
	stopped     bool
}

// TestKafkaClusterFailover: ingest, persist and the stream run against a
// three-broker cluster (three replicas, min.insync.replicas=2) under a
// steady ingest load while the leader of the most partitions is killed
// (SIGKILL) and started again, another broker is paused (SIGSTOP), and then
// two brokers are paused at once. Every item answered accepted is stored
// once with its rule hits and alerts once each; nothing is answered
// accepted while two brokers are paused; the time until each role makes
// progress again is logged. The load runs until the last role has
// recovered, so every recovery is seen under load.
func TestKafkaClusterFailover(t *testing.T) {
	t.Parallel()
	f := startKafkaFailover(t)
	waitUntil(t, 3*time.Minute, "a steady load", func() error {
		if n := f.load.countStatus("accepted"); n < 200 {
			return fmt.Errorf("%d accepted", n)
		}
		return nil
	})
	victim := f.killLeader(t)
	f.hangOne(t, victim)
	f.hangTwo(t)
	f.stopLoad()
	f.check(t)
}

// startKafkaFailover starts the cluster, makes the topics and the rules,
// starts ingest+persist and the stream, and starts the load.
func startKafkaFailover(t *testing.T) *kafkaFailover {
	testenv.Binary(t)
	f := &kafkaFailover{size: kafkaFailoverSizes()}
	started := time.Now()
	f.cluster = testenv.StartPrivateKafkaCluster(t)
	t.Logf("three-broker cluster started in %s", time.Since(started).Round(100*time.Millisecond))
	prefix := uniqueName(t, "kfail") + "."
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.cluster.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f.adm = kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	res, err := kafkatopics.Ensure(ctx, f.adm, kafkatopics.Spec{Prefix: prefix, Partitions: 6, ReplicationFactor: 3})
	cancel()
	if err != nil || len(res.Refused) > 0 {
		t.Fatalf("creating topics %s*: %v %v", prefix, err, res.Refused)
	}
	f.topic = prefix + "txn.ingested"
	checkReplication(t, f.adm, f.topic)

	db := dbtest.New(t)
	ws, key := ingestWorkspace(t, db.AppURL)
	f.ws = ws
	f.super = db.Connect(t, db.SuperuserURL)
	for _, r := range []struct {
		name, expr string
		alert      bool
	}{{"t_every", `event.amount >= 0`, true}, {"t_out", `event.direction == "out"`, false}} {
		mustExec(t, f.super, `INSERT INTO speculapro.rules (workspace_id, name, description, applies_to, expression, severity, action, alert, score)
VALUES ($1, $2, 'failover test', 'transaction', $3, 'high', 'alert', $4, 10)`, ws, r.name, r.expr, r.alert)
	}

	addr := testenv.FreeAddr(t)
	base := "http://" + addr
	env := ingestEnv(f.cluster.Brokers(), prefix, prefix+"persist", db, addr)
	env["SP_REDIS_URL"] = testenv.RedisURL(t)
	env["SP_STREAM_GROUP"] = prefix + "stream"
	env["SP_STREAM_REPLAY_TTL"] = "30m"
	logs := t.TempDir()
	f.api = newBinProcess(t).named("ingest+persist").toFile(filepath.Join(logs, "ingest.log"))
	f.api.start(t, env, ingestStreamsArgs...)
	f.stream = newBinProcess(t).named("stream").toFile(filepath.Join(logs, "stream.log"))
	f.stream.start(t, env, "run", "--set", "http.address="+f.stream.httpAddr, streamPipeline)
	// Registered after the processes' own cleanups, so it runs before
	// them, while their logs are still there.
	t.Cleanup(func() {
		if t.Failed() {
			logWarnings(t, f.api, f.stream)
		}
	})
	ingestWaitReady(t, f.api, base)

	f.load = &failoverLoad{base: base, key: key, at: persistBase.Add(time.Minute), client: &http.Client{Timeout: time.Minute},
		limit: failoverMaxItems, answered: map[int]string{}, ids: map[int]string{}, stop: make(chan struct{})}
	f.load.run(f.size.clients, f.size.pause)
	t.Cleanup(f.stopLoad)
	return f
}

// failoverMaxItems bounds the load of a run that never recovers: far more
// than either size sends in its timeline.
const failoverMaxItems = 200000

func (f *kafkaFailover) stopLoad() {
	if !f.stopped {
		f.stopped = true
		close(f.load.stop)
		f.load.done.Wait()
	}
}

// recovered logs how long after since each role made progress again: the
// API accepted an item sent after since, persist stored it, the stream
// stored its hit.
func (f *kafkaFailover) recovered(t *testing.T, what string, since time.Time) {
	t.Helper()
	var item int
	var answered time.Time
	waitUntil(t, 3*time.Minute, what+": an item accepted", func() error {
		var ok bool
		if item, answered, ok = f.load.firstAcceptedAfter(since); !ok {
			return fmt.Errorf("none yet (%d sent, %d answered retry so far)", f.load.sent(), f.load.countStatus("retry"))
		}
		return nil
	})
	extID := fmt.Sprintf("e2e-%06d", item)
	var stored, hit time.Time
	waitUntil(t, 3*time.Minute, what+": the item stored and hit", func() error {
		if stored.IsZero() && persistCount(t, f.super, `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1 AND external_id = $2`, f.ws, extID) > 0 {
			stored = time.Now()
		}
		if hit.IsZero() && persistCount(t, f.super, `SELECT count(*) FROM speculapro.rule_hits h JOIN speculapro.transactions x ON x.id = h.event_id
WHERE x.workspace_id = $1 AND x.external_id = $2`, f.ws, extID) > 0 {
			hit = time.Now()
		}
		if stored.IsZero() || hit.IsZero() {
			return fmt.Errorf("stored %v, hit %v", !stored.IsZero(), !hit.IsZero())
		}
		return nil
	})
	t.Logf("%s: ingest accepted again after %s, persist stored it after %s, stream hit it after %s (upper bounds: polled every 200ms)", what,
		answered.Sub(since).Round(100*time.Millisecond), stored.Sub(since).Round(100*time.Millisecond), hit.Sub(since).Round(100*time.Millisecond))
}

// killLeader SIGKILLs the broker leading the most partitions of the busiest
// topic, waits for every role to recover, and starts it again.
func (f *kafkaFailover) killLeader(t *testing.T) *testenv.PrivateKafkaBroker {
	victim := f.cluster.Node(busiestLeader(t, f.adm, f.topic))
	if victim == nil {
		t.Fatalf("the leader of %s is no node of the cluster", f.topic)
	}
	killedAt := time.Now()
	victim.Kill()
	t.Logf("killed broker %d (SIGKILL), the leader of the most partitions of %s", victim.NodeID(), f.topic)
	f.recovered(t, "leader killed", killedAt)
	restartedAt := time.Now()
	victim.Start()
	t.Logf("broker %d started again (a JVM start and log recovery) in %s", victim.NodeID(), time.Since(restartedAt).Round(100*time.Millisecond))
	waitFullISR(t, f.adm, f.topic)
	t.Logf("broker %d back in every ISR of %s %s after it was started", victim.NodeID(), f.topic, time.Since(restartedAt).Round(100*time.Millisecond))
	return victim
}

// hangOne SIGSTOPs a broker other than victim for size.hang.
func (f *kafkaFailover) hangOne(t *testing.T, victim *testenv.PrivateKafkaBroker) {
	var paused *testenv.PrivateKafkaBroker
	for _, n := range f.cluster.Nodes {
		if n != victim {
			paused = n
			break
		}
	}
	pausedAt := time.Now()
	paused.Pause()
	// The broker runs again after size.hang whether or not every role has
	// recovered by then: a hang of that long, not one until the roles
	// recover.
	resumed := make(chan time.Time, 1)
	timer := time.AfterFunc(f.size.hang, func() { paused.Resume(); resumed <- time.Now() })
	t.Cleanup(func() { timer.Stop() })
	t.Logf("paused broker %d (SIGSTOP) for %s", paused.NodeID(), f.size.hang)
	f.recovered(t, "broker paused", pausedAt)
	resumedAt := <-resumed
	waitFullISR(t, f.adm, f.topic)
	t.Logf("broker %d resumed after %s and back in every ISR %s later", paused.NodeID(), resumedAt.Sub(pausedAt).Round(100*time.Millisecond),
		time.Since(resumedAt).Round(100*time.Millisecond))
}

// hangTwo SIGSTOPs two brokers for size.twoHang: one replica is left, fewer
// than min.insync.replicas, so nothing may be answered accepted until they
// run again.
func (f *kafkaFailover) hangTwo(t *testing.T) {
	two := []*testenv.PrivateKafkaBroker{f.cluster.Nodes[0], f.cluster.Nodes[1]}
	twoAt := time.Now()
	for _, n := range two {
		n.Pause()
	}
	// A moment after the pause, so that none of the probe's records can
	// have reached a broker before it stopped.
	time.Sleep(time.Second + 100*time.Millisecond)
	probe := f.load.post(f.load.take(5))
	took := probe.answered.Sub(probe.sent)
	time.Sleep(time.Until(twoAt.Add(f.size.twoHang)))
	resumedAt := time.Now()
	for _, n := range two {
		n.Resume()
	}
	for i, s := range probe.status {
		if s == "accepted" || s == "duplicate" {
			t.Errorf("two brokers paused: item %d answered %s", probe.items[i], s)
		}
	}
	t.Logf("two brokers paused for %s: a request's %d items answered %v after %s", f.size.twoHang, len(probe.items), probe.status, took.Round(100*time.Millisecond))
	// Requests sent a moment after the pause and answered before the
	// resume (the probe among them) were written with at most one replica
	// up.
	f.load.mu.Lock()
	during := 0
	for _, r := range f.load.requests {
		if r.sent.After(twoAt.Add(time.Second)) && r.answered.Before(resumedAt) {
			during++
			for i, s := range r.status {
				if s == "accepted" {
					t.Errorf("item %d answered accepted while two brokers were paused (sent %s after the pause)", r.items[i], r.sent.Sub(twoAt))
				}
			}
		}
	}
	f.load.mu.Unlock()
	if during == 0 {
		t.Errorf("two brokers paused: no request was sent and answered while they were (the probe was answered %s after the pause)", probe.answered.Sub(twoAt))
	}
	t.Logf("two brokers paused: %d requests sent and answered while paused, none accepted", during)
	f.recovered(t, "two brokers resumed", resumedAt)
}

// check sends every item answered retry again until it is accepted or a
// duplicate, as a client does, and then counts: every item stored exactly
// once, each hit by t_every with an alert and the outgoing ones by t_out,
// each hit and alert once.
func (f *kafkaFailover) check(t *testing.T) {
	load := f.load
	retried := load.countStatus("retry")
	all := load.sent()
	ids := load.resend(t, all)
	if t.Failed() {
		t.FailNow()
	}
	conn := f.super
	waitCount(t, conn, all, `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1`, f.ws)
	outs := all / 2 // ingestTxn: even items are "in", odd ones "out"
	waitCount(t, conn, all+outs, `SELECT count(*) FROM speculapro.rule_hits WHERE workspace_id = $1`, f.ws)
	time.Sleep(3 * time.Second)
	stored := storedIDs(t, conn, `SELECT id::text FROM speculapro.transactions WHERE workspace_id = $1`, f.ws)
	failDiffs(t, "transactions", compareIDs(ids, stored))
	for _, r := range []struct {
		what, query string
		want        int
	}{
		{"t_every hits", `SELECT h.event_id::text FROM speculapro.rule_hits h JOIN speculapro.rules r ON r.id = h.rule_id WHERE h.workspace_id = $1 AND r.name = 't_every'`, all},
		{"t_out hits", `SELECT h.event_id::text FROM speculapro.rule_hits h JOIN speculapro.rules r ON r.id = h.rule_id WHERE h.workspace_id = $1 AND r.name = 't_out'`, outs},
		{"alerts", `SELECT a.event_id::text FROM speculapro.alerts a WHERE a.workspace_id = $1`, all},
	} {
		got := storedIDs(t, conn, r.query, f.ws)
		n := 0
		for id, c := range got {
			n += c
			if c > 1 {
				t.Errorf("%s: event %s %d times", r.what, id, c)
			}
			if !ids[id] {
				t.Errorf("%s: event %s was never accepted", r.what, id)
			}
		}
		if n != r.want {
			t.Errorf("%s: %d rows, want %d", r.what, n, r.want)
		}
	}
	t.Logf("%d items sent (%d answered retry at least once and sent again): %d transactions stored once each, %d t_every hits, %d t_out hits, %d alerts",
		all, retried, len(stored), all, outs, all)
	for _, p := range []*binProcess{f.api, f.stream} {
		if !p.running() {
			t.Errorf("%s exited during the run:\n%s", p.name, p.tail(3000))
		}
	}
}

// resend sends items 0 to all-1 that were not answered accepted or
// duplicate again, up to ten rounds, fails the test for any still not
// accepted and for the load's protocol faults, and returns the ids the
// items were given.
func (l *failoverLoad) resend(t *testing.T, all int) map[string]bool {
	for attempt := 0; attempt < 10; attempt++ {
		var again []int
		l.mu.Lock()
		for n := 0; n < all; n++ {
			if s := l.answered[n]; s != "accepted" && s != "duplicate" {
				again = append(again, n)
			}
		}
		l.mu.Unlock()
		if len(again) == 0 {
			break
		}
		for i := 0; i < len(again); i += 10 {
			l.post(again[i:min(i+10, len(again))])
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.fails {
		t.Error(f)
	}
	ids := map[string]bool{}
	for n := 0; n < all; n++ {
		if s := l.answered[n]; s != "accepted" && s != "duplicate" {
			t.Errorf("item %d still answered %q after the resends", n, s)
		}
		ids[l.ids[n]] = true
	}
	return ids
}

// logWarnings logs each process's distinct warnings and errors, the last
// occurrence of each with how often it came: a failed run's plain tail is
// mostly one repeated line.
func logWarnings(t *testing.T, procs ...*binProcess) {
	for _, p := range procs {
		b, err := os.ReadFile(p.logFile)
		if err != nil {
			t.Logf("%s's log: %v", p.name, err)
			continue
		}
		var order []string
		last, count := map[string]string{}, map[string]int{}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
				continue
			}
			_, msg, _ := strings.Cut(line, " level=")
			if _, seen := last[msg]; !seen {
				order = append(order, msg)
			}
			last[msg], count[msg] = line, count[msg]+1
		}
		var out strings.Builder
		for _, msg := range order[max(0, len(order)-40):] {
			fmt.Fprintf(&out, "%dx, last: %s\n", count[msg], last[msg])
		}
		t.Logf("%s's distinct warnings and errors (the last 40):\n%s", p.name, out.String())
	}
}

// checkReplication fails the test unless topic has three replicas per
// partition and min.insync.replicas=2: with acks=all that is what makes an
// accepted item one that two brokers hold.
func checkReplication(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topics, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range topics[topic].Partitions.Sorted() {
		if len(p.Replicas) != 3 {
			t.Fatalf("%s[%d] has replicas %v, want 3", topic, p.Partition, p.Replicas)
		}
	}
	// A topic just made may not be known yet to the broker answering.
	waitUntil(t, time.Minute, topic+" min.insync.replicas=2", func() error {
		cfgs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return err
		}
		rc, err := cfgs.On(topic, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			return err
		}
		for _, c := range rc.Configs {
			if c.Key == "min.insync.replicas" {
				if c.MaybeValue() != "2" {
					t.Fatalf("%s min.insync.replicas = %q, want 2", topic, c.MaybeValue())
				}
				return nil
			}
		}
		return fmt.Errorf("no min.insync.replicas among %d configs", len(rc.Configs))
	})
}

// busiestLeader is the node that leads the most partitions of topic, once
// every partition has a leader.
func busiestLeader(t *testing.T, adm *kadm.Client, topic string) int32 {
	t.Helper()
	best := int32(-1)
	waitUntil(t, time.Minute, "a leader for every partition of "+topic, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		topics, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		led := map[int32]int{}
		for _, p := range topics[topic].Partitions {
			if p.Leader < 0 || p.Err != nil {
				return fmt.Errorf("%s[%d] leader %d: %v", topic, p.Partition, p.Leader, p.Err)
			}
			led[p.Leader]++
		}
		best = -1
		for id, n := range led {
			if best < 0 || n > led[best] || (n == led[best] && id < best) {
				best = id
			}
		}
		if best < 0 {
			return fmt.Errorf("%s has no partitions listed", topic)
		}
		return nil
	})
	return best
}

// waitFullISR waits until every partition of topic has all three replicas
// in sync again.
func waitFullISR(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	waitUntil(t, 3*time.Minute, topic+" fully in sync", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		topics, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		for _, p := range topics[topic].Partitions {
			if len(p.ISR) != 3 {
				return fmt.Errorf("%s[%d] ISR %v", topic, p.Partition, p.ISR)
			}
		}
		return nil
	})
}

// storedIDs runs query (one text column) and counts each value.
func storedIDs(t *testing.T, conn *pgx.Conn, query string, args ...any) map[string]int {
	t.Helper()
	rows, err := conn.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	out := map[string]int{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// compareIDs: every id of want stored exactly once, nothing else stored.
func compareIDs(want map[string]bool, got map[string]int) []string {
	var diffs []string
	for id := range want {
		if got[id] != 1 {
			diffs = append(diffs, fmt.Sprintf("%s stored %d times", id, got[id]))
		}
	}
	for id := range got {
		if !want[id] {
			diffs = append(diffs, fmt.Sprintf("%s stored but never accepted", id))
		}
	}
	sort.Strings(diffs)
	return diffs
}
