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

// TestIngestConflictAfterExpiry: once the Redis entries of stored
// transactions and account events are gone (expired, or lost in a
// failover), a resend with other content is still answered conflict and an
// unchanged one duplicate, each with the first ID: the database row keeps
// the content hash. First straight from the database, then from the entry
// the lookup wrote back. A row stored without a hash (before rows kept
// one) answers duplicate whatever the resend carries, as documented.
func TestIngestConflictAfterExpiry(t *testing.T) {
	t.Parallel()
	k := newPersistKafka(t)
	db := dbtest.New(t)
	ws, key := ingestWorkspace(t, db.AppURL)
	redisPrefix := uniqueName(t, "conflict") + ":"
	addr := testenv.FreeAddr(t)
	base := "http://" + addr
	env := ingestEnv(k.brokers, k.prefix, k.group, db, addr)
	env["SP_REDIS_URL"], env["SP_REDIS_KEY_PREFIX"] = testenv.RedisURL(t), redisPrefix
	p := newBinProcess(t)
	p.start(t, env, "streams", "-o", "config/observability.yaml",
		"pipelines/ingest.yaml", "pipelines/persist.yaml", "pipelines/persist-events.yaml")
	ingestWaitReady(t, p, base)
	client := &http.Client{Timeout: 60 * time.Second}

	at := persistBase
	txn := func(i int, shift time.Duration) map[string]any {
		m := ingestTxn(i, at.Add(shift))
		// Spacing and escapes the API compacts, and the persister reads
		// back from the record: the stored hash must be the item's.
		m["metadata"] = map[string]any{"note": "café \u2028 <&>", "n": []any{1, 2.5}}
		return m
	}
	ev := func(i int, shift time.Duration) map[string]any {
		return map[string]any{"external_id": []string{"ev-a", "ev-b"}[i], "occurred_at": at.Add(shift).Format(time.RFC3339Nano),
			"customer_external_id": "cust-1", "type": "sim_swap", "attributes": map[string]any{"carrier": "T"}}
	}
	post := func(path string, items ...map[string]any) ingestAnswer {
		t.Helper()
		code, ans := ingestPost(t, client, base, key, path, ingestBody(t, items...))
		if code != http.StatusOK || len(ans.Results) != len(items) {
			t.Fatalf("POST %s: %d %+v", path, code, ans)
		}
		return ans
	}
	firstTxns := post("/v1/transactions", txn(0, 0), txn(1, 0), txn(2, 0), txn(3, 0))
	firstEvs := post("/v1/account-events", ev(0, 0), ev(1, 0))
	if firstTxns.Accepted != 4 || firstEvs.Accepted != 2 {
		t.Fatalf("first sends: %+v %+v", firstTxns, firstEvs)
	}

	conn := db.Connect(t, db.SuperuserURL)
	ctx := context.Background()
	waitCount(t, conn, 4, `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1`, ws)
	waitCount(t, conn, 2, `SELECT count(*) FROM speculapro.account_events WHERE workspace_id = $1`, ws)
	for _, table := range []string{"transactions", "account_events"} {
		if n := persistCount(t, conn, `SELECT count(*) FROM speculapro.`+table+` WHERE workspace_id = $1 AND content_hash IS NULL`, ws); n != 0 {
			t.Errorf("%d rows of %s stored without their content hash", n, table)
		}
	}
	// Transaction 3 as a row stored before rows kept their hash.
	if _, err := conn.Exec(ctx, `UPDATE speculapro.transactions SET content_hash = NULL WHERE workspace_id = $1 AND external_id = $2`,
		ws, "e2e-000003"); err != nil {
		t.Fatal(err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(t)})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, redisPrefix+"idem*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("Redis holds %d resend keys (%v)", len(keys), err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}

	check := func(what string, ans, first ingestAnswer, want ...string) {
		t.Helper()
		for i, r := range ans.Results {
			if r.Status != want[i] || r.ID != first.Results[i].ID {
				t.Errorf("%s: item %d answered %s %s (%s), want %s with the first ID %s", what, i, r.Status, r.ID, r.Message, want[i], first.Results[i].ID)
			}
		}
	}
	changed := func(m map[string]any, field string, v any) map[string]any { m[field] = v; return m }

	// The entries gone: the database answers. Another occurred_at too, which
	// a resend may carry and which is not content.
	check("after expiry, from the database", post("/v1/transactions",
		changed(txn(0, time.Millisecond), "amount", "7777.00"), // changed: conflict
		txn(1, time.Millisecond),                               // unchanged: duplicate
		txn(2, 0),
		changed(txn(3, 0), "amount", "7777.00"), // no stored hash: duplicate
	), firstTxns, "conflict", "duplicate", "duplicate", "duplicate")
	check("account events after expiry, from the database", post("/v1/account-events",
		changed(ev(0, time.Millisecond), "attributes", map[string]any{"carrier": "O2"}),
		ev(1, time.Millisecond),
	), firstEvs, "conflict", "duplicate")

	// The lookup wrote the stored hashes back to Redis: the next resends are
	// answered from there, by the first content, whatever the last resend.
	check("after expiry, from the entries written back", post("/v1/transactions",
		txn(0, 0),
		changed(txn(1, 0), "reference", "other"),
		changed(txn(2, 0), "direction", "out"),
		txn(3, 0),
	), firstTxns, "duplicate", "conflict", "conflict", "duplicate")
	check("account events from the entries written back", post("/v1/account-events",
		ev(0, 0),
		changed(ev(1, 0), "type", "failed_otp"),
	), firstEvs, "duplicate", "conflict")

	time.Sleep(2 * time.Second) // anything sent by mistake would be stored by now
	if got := persistCount(t, conn, `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1`, ws); got != 4 {
		t.Errorf("%d transactions stored, want 4", got)
	}
	if got := persistCount(t, conn, `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1 AND amount = 7777`, ws); got != 0 {
		t.Errorf("%d transactions stored with a conflicting resend's amount, want the first kept", got)
	}
	if got := persistCount(t, conn, `SELECT count(*) FROM speculapro.account_events WHERE workspace_id = $1`, ws); got != 2 {
		t.Errorf("%d account events stored, want 2", got)
	}
}
