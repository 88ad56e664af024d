package tests

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
)

// A persister SIGKILLed and started again stores again within seconds: the
// group gives the dead member's partitions away after the input's session
// timeout (6 s), not Kafka's default 45 s.
func TestPersistResumesSecondsAfterSIGKILL(t *testing.T) {
	t.Parallel()
	db, k, conn, ws := newPersistFixture(t)
	const countTxns = "SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1"
	k.produceTxns(t, ws, 0, 30)
	p := newBinProcess(t)
	p.start(t, persistEnv(k, db.SystemURL), p.runArgs("pipelines/persist.yaml")...)
	if n := waitCount(t, conn, 30, countTxns, ws); n != 30 {
		t.Fatalf("stored %d, want 30", n)
	}
	p.kill(t)
	killed := time.Now()
	k.produceTxns(t, ws, 30, 60)
	p2 := newBinProcess(t)
	p2.start(t, persistEnv(k, db.SystemURL), p2.runArgs("pipelines/persist.yaml")...)
	if n := waitCount(t, conn, 60, countTxns, ws); n != 60 {
		t.Fatalf("after the restart: stored %d, want 60", n)
	}
	resumed := time.Since(killed)
	t.Logf("stored again %s after SIGKILL", resumed.Round(time.Millisecond))
	if resumed > 15*time.Second {
		t.Errorf("the restarted persister stored nothing for %s after SIGKILL", resumed.Round(time.Millisecond))
	}
	if code := p2.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

// Batches that keep failing (the database refuses them for a reason an
// operator fixes: disk full, raised here by a trigger for marked rows)
// while their partitions move between two persisters in repeated
// rebalances: once revoke_wait has passed, a batch of a partition given up
// stops retrying and frees its writer. Before, every round left the
// long-lived persister one more batch retrying for a partition it no longer
// owned, until its four writers were all taken and nothing more was stored.
func TestPersistRevokedBatchFreesItsWriter(t *testing.T) {
	t.Parallel()
	const partitions = 6
	db := dbtest.New(t)
	name := uniqueName(t, t.Name())
	k := &persistKafka{testKafka: newTestKafka(t), prefix: name + ".", group: name}
	k.create(t, partitions, k.prefix+"txn.ingested", k.prefix+"txn.ingested.dlq")
	k.own(nil, []string{k.group})
	conn := db.Connect(t, db.SuperuserURL)
	ws := persistWorkspace(t, conn)
	for _, q := range []string{
		`CREATE FUNCTION speculapro.test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.reference = 'stuck' THEN RAISE EXCEPTION 'test: disk full' USING ERRCODE = '53100'; END IF;
  RETURN NEW;
END $$`,
		`CREATE TRIGGER test_disk_full BEFORE INSERT ON speculapro.transactions FOR EACH ROW EXECUTE FUNCTION speculapro.test_disk_full()`,
	} {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	produce := rawProducer(t, k)
	// A stuck record at the head of partitions 2 to 5: their batches keep
	// failing, whoever owns them. A second member joining takes three of
	// the six partitions, so at least one stuck partition moves each round.
	var recs []*kgo.Record
	for _, part := range []int{2, 3, 4, 5} {
		_, val, _ := persistTxn(t, ws, 7000+part, func(e *event.Envelope) { e.Reference = "stuck" })
		recs = append(recs, &kgo.Record{Partition: int32(part), Key: []byte("stuck"), Value: val})
	}
	produce(recs...)

	// persist.yaml with a short revoke_wait, so the test does not wait 10 s
	// per rebalance.
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "pipelines", "persist.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(raw), "    consumer_group:", "    revoke_wait: 1s\n    consumer_group:", 1)
	pipeline := filepath.Join(t.TempDir(), "persist.yaml")
	if err := os.WriteFile(pipeline, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := persistEnv(k, db.SystemURL)
	env["SP_PERSIST_WORKERS"] = "4"
	start := func(name string) *binProcess {
		p := newBinProcess(t).named(name)
		return p.start(t, env, p.runArgs(pipeline)...)
	}
	a := start("persister A")
	retryLine := persistLogLine("ERROR", "persist: batch failed, retrying")
	if !poll(waitBound, 100*time.Millisecond, func() bool {
		return len(retryLine.FindAllString(a.stdout.String(), -1)) >= 3
	}) {
		t.Fatal("the stuck batches are not being retried")
	}
	// Repeated rebalances: a second member joins and leaves four times.
	for round := range 4 {
		c := start("persister B" + strconv.Itoa(round))
		time.Sleep(4 * time.Second)
		c.stop(t)
		time.Sleep(3 * time.Second)
	}
	// Records of the partitions that are not stuck are still stored.
	recs = recs[:0]
	for n := range 60 {
		_, val, _ := persistTxn(t, ws, n, nil)
		recs = append(recs, &kgo.Record{Partition: int32(n % 2), Key: []byte("good-" + strconv.Itoa(n)), Value: val})
	}
	produce(recs...)
	const countGood = "SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1"
	if n := waitCount(t, conn, 60, countGood, ws); n != 60 {
		t.Errorf("stored %d of 60 records of the partitions that are not stuck: the members ran out of writers", n)
	}
	revoked := strings.Count(a.stdout.String(), "persist: stopped retrying a batch whose partitions were revoked")
	t.Logf("%d stuck batches stopped after their partitions were revoked", revoked)
	if revoked == 0 {
		t.Errorf("no batch of a revoked partition stopped retrying")
	}

	if code := a.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

// A persister started before its topic exists says so (a WARN naming the
// topic and `speculapro topics`) and is not ready; once the topic is
// created it connects and stores what arrives.
func TestPersistWaitsForAMissingTopicAndSaysSo(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	name := uniqueName(t, t.Name())
	k := &persistKafka{testKafka: newTestKafka(t), prefix: name + ".", group: name}
	k.own(nil, []string{k.group})
	conn := db.Connect(t, db.SuperuserURL)
	ws := persistWorkspace(t, conn)
	p := newBinProcess(t)
	p.start(t, persistEnv(k, db.SystemURL), p.runArgs("pipelines/persist.yaml")...)
	warn := persistLogLine("WARN", "kafka_franz: topic "+k.prefix+"txn.ingested does not exist (group "+k.group+" waits for it): create it with `speculapro topics`")
	if !poll(waitBound, 100*time.Millisecond, func() bool { return warn.MatchString(p.stdout.String()) }) {
		t.Fatalf("no WARN naming the missing topic and the fix:\n%s", p.tail(3000))
	}
	if code := p.ready(); code != 503 {
		t.Errorf("/ready answered %d while the topic is missing, want 503", code)
	}
	k.create(t, persistPartitions, k.prefix+"txn.ingested", k.prefix+"txn.ingested.dlq")
	k.produceTxns(t, ws, 0, 10)
	if n := waitCount(t, conn, 10, "SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1", ws); n != 10 {
		t.Fatalf("stored %d after the topic was created, want 10", n)
	}
	if code := p.ready(); code != 200 {
		t.Errorf("/ready answered %d once connected, want 200", code)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}
