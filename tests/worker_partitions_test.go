package tests

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/event"
)

// With next month's partitions dropped, two workers started at once
// recreate them (and the months up to SP_WORKER_PARTITIONS_AHEAD), each
// partition created once, logged once; a transaction dated next month is
// then stored by the persister.
func TestWorkerPartitionsAhead(t *testing.T) {
	t.Parallel()
	s := newWorkerStack(t)
	now := time.Now().UTC()
	month := func(ahead int) string {
		return time.Date(now.Year(), now.Month()+time.Month(ahead), 1, 0, 0, 0, 0, time.UTC).Format("2006_01")
	}
	next := month(1)
	if _, err := s.conn.Exec(t.Context(), fmt.Sprintf(
		"DROP TABLE speculapro.transactions_p%s, speculapro.account_events_p%s", next, next)); err != nil {
		t.Fatalf("dropping next month's partitions: %v", err)
	}
	// migrate made three months ahead; five asks for two more.
	want := []string{"account_events_p" + next, "transactions_p" + next}
	for _, m := range []int{4, 5} {
		want = append(want, "account_events_p"+month(m), "transactions_p"+month(m))
	}
	sort.Strings(want)

	env := s.with(map[string]string{"SP_WORKER_PARTITIONS_AHEAD": "5"})
	workers := []*binProcess{newBinProcess(t).named("worker 1"), newBinProcess(t).named("worker 2")}
	for _, w := range workers {
		w.start(t, env, w.runArgs("pipelines/worker.yaml")...)
	}
	covered := time.Date(now.Year(), now.Month()+6, 1, 0, 0, 0, 0, time.UTC).Unix()
	for _, w := range workers {
		waitUntil(t, waitBound, w.name+"'s partition check", func() error {
			scrape, err := w.scrape()
			if err != nil {
				return err
			}
			if got := metricSum(scrape, "speculapro_worker_partitions_covered_until_seconds"); got != float64(covered) {
				return fmt.Errorf("covered until %v, want %d", got, covered)
			}
			return nil
		})
	}
	line := regexp.MustCompile(`level=INFO msg="worker: created partition" partition=(\S+)`)
	var created []string
	for _, w := range workers {
		for _, m := range line.FindAllStringSubmatch(w.stdout.String()+w.stderr.String(), -1) {
			created = append(created, m[1])
		}
	}
	sort.Strings(created)
	if strings.Join(created, " ") != strings.Join(want, " ") {
		t.Errorf("the two workers logged creating\n  %v\nwant each of these once\n  %v", created, want)
	}
	if n := s.count(t, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE c.relname = ANY($1)`, want); n != len(want) {
		t.Errorf("%d of the %d partitions exist", n, len(want))
	}

	// A transaction of next month, through Kafka and the real persister.
	k := newPersistKafka(t)
	firstNext := time.Date(now.Year(), now.Month()+1, 1, 3, 0, 0, 0, time.UTC)
	key, val, id := persistTxn(t, s.ws, 1, func(e *event.Envelope) { e.OccurredAt = firstNext })
	k.produceTo(t, "txn.ingested", &kgo.Record{Key: []byte(key), Value: val})
	persister := newBinProcess(t).named("persister")
	persister.start(t, persistEnv(k, s.db.SystemURL), persister.runArgs("pipelines/persist.yaml")...)
	waitUntil(t, waitBound, "next month's transaction to be stored", func() error {
		if n := s.count(t, "SELECT count(*) FROM speculapro.transactions_p"+next+" WHERE id = $1", id); n != 1 {
			return errors.New("not stored yet")
		}
		return nil
	})
	persister.stop(t)
	for _, w := range workers {
		w.stop(t)
	}
}
