package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

// TestIngestResendStoredOnce: two ingest processes and
// a persister; resends go to the other process and to restarted ones, with
// occurred_at shifted by +1 µs, +500 µs and +1 ms, and once more after the
// first IDs are gone from Redis (the database's (workspace_id, external_id)
// index answers). Every resend answers duplicate with the FIRST ID, and
// each transaction is one row under that ID.
func TestIngestResendStoredOnce(t *testing.T) {
	t.Parallel()
	k := newPersistKafka(t)
	db := dbtest.New(t)
	ws, key := ingestWorkspace(t, db.AppURL)
	redisPrefix := uniqueName(t, "idem") + ":"
	env := func(addr string) map[string]string {
		e := ingestEnv(k.brokers, k.prefix, k.group, db, addr)
		e["SP_REDIS_URL"], e["SP_REDIS_KEY_PREFIX"] = testenv.RedisURL(t), redisPrefix
		e["SP_INGEST_IDEMPOTENCY_TTL"] = "10m" // the test's keys leave the shared Redis soon
		return e
	}
	persister := newBinProcess(t).named("persist")
	persister.start(t, env(testenv.FreeAddr(t)), persister.runArgs("pipelines/persist.yaml")...)
	addrs := [2]string{testenv.FreeAddr(t), testenv.FreeAddr(t)}
	var procs [2]*binProcess
	start := func(i int) {
		p := newBinProcess(t).named("ingest")
		p.start(t, env(addrs[i]), p.runArgs("pipelines/ingest.yaml")...)
		ingestWaitReady(t, p, "http://"+addrs[i])
		procs[i] = p
	}
	restart := func(i int) {
		if code := procs[i].stop(t); code != 0 {
			t.Errorf("ingest %d: exit code %d after SIGTERM", i, code)
		}
		start(i)
	}
	start(0)
	start(1)
	client := &http.Client{Timeout: 60 * time.Second}

	// Sub-millisecond digits, so +1 µs and +500 µs stay in the millisecond
	// and +1 ms leaves it.
	at := persistBase.Add(123456 * time.Nanosecond).Truncate(time.Microsecond)
	const n = 3
	send := func(proc int, shift time.Duration) ingestAnswer {
		t.Helper()
		items := make([]map[string]any, n)
		for i := range items {
			items[i] = ingestTxn(i, at)
			items[i]["external_id"] = []string{"idem-1", "idem-2", "idem-3"}[i]
			items[i]["occurred_at"] = at.Add(shift).Format(time.RFC3339Nano)
		}
		code, ans := ingestPost(t, client, "http://"+addrs[proc], key, "/v1/transactions", ingestBody(t, items...))
		if code != http.StatusOK {
			t.Fatalf("POST to ingest %d: %d %s", proc, code, ans.Error)
		}
		return ans
	}
	first := send(0, 0)
	if first.Accepted != n {
		t.Fatalf("first send: %+v", first)
	}
	check := func(what string, ans ingestAnswer) {
		t.Helper()
		for i, r := range ans.Results {
			if r.Status != "duplicate" || r.ID != first.Results[i].ID {
				t.Errorf("%s: item %d answered %s %s (%s), want duplicate %s", what, i, r.Status, r.ID, r.Message, first.Results[i].ID)
			}
		}
	}

	restart(0)
	check("+1 µs to the other process", send(1, time.Microsecond))
	restart(1)
	check("+500 µs to the restarted first process", send(0, 500*time.Microsecond))
	check("+1 ms to the restarted second process", send(1, time.Millisecond))

	conn := db.Connect(t, db.SuperuserURL)
	const rows = `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1`
	waitCount(t, conn, n, rows, ws)

	// The first IDs gone from Redis (expired, or lost in a failover): the
	// database's index answers, with the stored ID.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(t)})
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, redisPrefix+"idem:*").Result()
	if err != nil || len(keys) != n {
		t.Fatalf("Redis holds %d resend keys (%v), want %d", len(keys), err, n)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	restart(0)
	check("+1 ms after Redis lost the first IDs", send(0, time.Millisecond))
	check("+1 ms once more (Redis knows it from the database now)", send(1, time.Millisecond))

	time.Sleep(2 * time.Second) // anything sent by mistake would be stored by now
	if got := persistCount(t, conn, rows, ws); got != n {
		t.Errorf("%d rows stored, want %d (one per transaction)", got, n)
	}
	for i, r := range first.Results {
		var id string
		var count int
		if err := conn.QueryRow(ctx, `SELECT min(id::text), count(*) FROM speculapro.transactions WHERE workspace_id = $1 AND external_id = $2`,
			ws, []string{"idem-1", "idem-2", "idem-3"}[i]).Scan(&id, &count); err != nil {
			t.Fatal(err)
		}
		if count != 1 || id != r.ID {
			t.Errorf("idem-%d: %d rows, id %s; want 1 row with the first ID %s", i+1, count, id, r.ID)
		}
	}
}

// redisAddr is the host:port of the test Redis.
func redisAddr(t *testing.T) string {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return opt.Addr
}
