package tests

import (
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
)

// PostgreSQL goes away for ~20 s in the middle of a run and comes back: the
// persister retries with backoff, catches up on its own, and every
// transaction is stored exactly once. It runs against a private PostgreSQL,
// because the shared one must never be stopped.
func TestPersistRidesOutDatabaseOutage(t *testing.T) {
	t.Parallel()
	perPhase := 1500
	if fullScale() {
		perPhase = 50000
	}
	pg := testenv.PrivatePostgres(t)
	db := dbtest.NewOn(t, pg.SuperuserURL, "speculapro")
	conn := db.Connect(t, db.SuperuserURL)
	ws := persistWorkspace(t, conn)

	k := newPersistKafka(t)
	const countTxns = "SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1"

	k.produceTxns(t, ws, 0, perPhase)
	p := newBinProcess(t)
	p.start(t, persistEnv(k, db.SystemURL), p.runArgs("pipelines/persist.yaml")...)
	if n := waitCount(t, conn, perPhase, countTxns, ws); n != perPhase {
		t.Fatalf("before the outage: stored %d, want %d", n, perPhase)
	}

	pg.Stop()
	outage := time.Now()
	k.produceTxns(t, ws, perPhase, 2*perPhase)
	retryLine := persistLogLine("ERROR", "persist: batch failed, retrying")
	for time.Since(outage) < 20*time.Second {
		time.Sleep(500 * time.Millisecond)
	}
	during := len(retryLine.FindAllString(p.stdout.String(), -1))
	if during == 0 {
		t.Errorf("no retry line logged during a 20 s outage")
	}
	// Readiness tells the truth: not ready while PostgreSQL is away, and the
	// engine's connection counters saw the output lose its connection.
	if code := p.ready(); code != 503 {
		t.Errorf("/ready answered %d during the outage, want 503", code)
	}
	if s, err := p.scrape(); err != nil || metricSum(s, "output_connection_lost") < 1 {
		t.Errorf("output_connection_lost = %v during the outage (scrape error %v), want at least 1", metricSum(s, "output_connection_lost"), err)
	}
	pg.Start()
	back := time.Now()
	conn = db.Connect(t, db.SuperuserURL)
	if n := waitCount(t, conn, 2*perPhase, countTxns, ws); n != 2*perPhase {
		t.Fatalf("after the outage: stored %d, want %d", n, 2*perPhase)
	}
	t.Logf("caught up %s after PostgreSQL came back; %d retry lines during the outage",
		time.Since(back).Round(time.Millisecond), during)
	if !poll(waitBound, 200*time.Millisecond, func() bool { return p.ready() == 200 }) {
		t.Errorf("/ready answered %d after PostgreSQL came back, want 200", p.ready())
	}

	// Exactly the transactions sent, each once, with their placeholders.
	var ids []event.UUID
	for n := range 2 * perPhase {
		_, _, id := persistTxn(t, ws, n, nil)
		ids = append(ids, id)
	}
	if n := persistCount(t, conn, "SELECT count(DISTINCT id) FROM speculapro.transactions WHERE id = ANY($1)", ids); n != 2*perPhase {
		t.Errorf("%d of the %d transactions sent are stored", n, 2*perPhase)
	}
	if n := persistCount(t, conn, "SELECT count(*) FROM speculapro.customers") + persistCount(t, conn, "SELECT count(*) FROM speculapro.accounts"); n != 13+29 {
		t.Errorf("%d customers and accounts, want 42", n)
	}

	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if got := k.committedOffsets(t, k.group); got != int64(2*perPhase) {
		t.Errorf("committed offsets add up to %d, want %d", got, 2*perPhase)
	}
}
