package dbmigrate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/speculapro/speculapro/internal/dbmigrate"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

// seedWorkspace gives workspace ws one row in every workspace table, and one
// transaction and account event in every partition of the window. A table
// added without a row here fails TestMigratedSchemaIsolatesEveryWorkspaceTable.
func seedWorkspace(t *testing.T, super *pgx.Conn, ws string) {
	t.Helper()
	ctx := context.Background()
	one := func(sql string, args ...any) string {
		t.Helper()
		var id string
		if err := super.QueryRow(ctx, sql+" RETURNING id::text", args...).Scan(&id); err != nil {
			t.Fatalf("seeding workspace %s: %s: %v", ws, sql, err)
		}
		return id
	}
	one("INSERT INTO workspaces (id, name) VALUES ($1::uuid, 'seed')", ws)
	one("INSERT INTO api_keys (workspace_id, name, key_prefix, key_hash) VALUES ($1::uuid, 'k', 'sp_live_', sha256(convert_to($2::text, 'UTF8')))", ws, "key-"+ws)
	cust := one("INSERT INTO customers (id, workspace_id, external_id) VALUES (gen_random_uuid(), $1::uuid, 'cust-1')", ws)
	acct := one(`INSERT INTO accounts (id, workspace_id, external_id, customer_id, number_encrypted, number_masked, number_fingerprint)
VALUES (gen_random_uuid(), $1::uuid, 'acct-1', $2::uuid, '\x01'::bytea, '****1234', sha256(convert_to($3::text, 'UTF8')))`, ws, cust, "acct-"+ws)
	one(`INSERT INTO counterparties (id, workspace_id, fingerprint, identifier_encrypted, identifier_masked, account_id)
VALUES (gen_random_uuid(), $1::uuid, sha256(convert_to($2::text, 'UTF8')), '\x02'::bytea, 'DE** 1234', $3::uuid)`, ws, "acct-"+ws, acct)
	first, months := dbmigrate.PartitionWindow(time.Now())
	var txn string
	var txnAt time.Time
	for i := range months {
		at := first.AddDate(0, i, 1)
		txn = one(`INSERT INTO transactions (id, workspace_id, external_id, account_id, customer_id, amount, currency, direction, occurred_at)
VALUES (gen_random_uuid(), $1::uuid, 'txn-' || $2::text, $3::uuid, $4::uuid, 10, 'EUR', 'out', $5)`, ws, at.Format("2006-01"), acct, cust, at)
		txnAt = at
		one(`INSERT INTO account_events (id, workspace_id, external_id, kind, customer_id, account_id, occurred_at)
VALUES (gen_random_uuid(), $1::uuid, 'ev-' || $2::text, 'account.opened', $3::uuid, $4::uuid, $5)`, ws, at.Format("2006-01"), cust, acct, at)
	}
	rule := one("INSERT INTO rules (workspace_id, name, expression) VALUES ($1::uuid, 'big', 'this.amount > 1000')", ws)
	hit := one(`INSERT INTO rule_hits (workspace_id, rule_id, rule_version, event_id, event_occurred_at)
VALUES ($1::uuid, $2::uuid, 1, $3::uuid, $4)`, ws, rule, txn, txnAt)
	if _, err := super.Exec(ctx, `INSERT INTO rule_evaluations (workspace_id, rule_id, rule_version, hour, events)
VALUES ($1::uuid, $2::uuid, 1, date_trunc('hour', now()), 1)`, ws, rule); err != nil {
		t.Fatalf("seeding workspace %s: rule_evaluations: %v", ws, err)
	}
	one(`INSERT INTO decisions (workspace_id, transaction_id, transaction_occurred_at, external_id, decision)
VALUES ($1::uuid, $2::uuid, $3, 'txn-x', 'review')`, ws, txn, txnAt)
	cas := one("INSERT INTO cases (workspace_id, customer_id, title) VALUES ($1::uuid, $2::uuid, 'look')", ws, cust)
	one(`INSERT INTO alerts (workspace_id, dedupe_key, rule_id, rule_hit_id, customer_id, title, case_id)
VALUES ($1::uuid, 'big:' || $2::text, $2::uuid, $3::uuid, $4::uuid, 'big payment', $5::uuid)`, ws, rule, hit, cust, cas)
	one("INSERT INTO case_events (workspace_id, case_id, kind) VALUES ($1::uuid, $2::uuid, 'commented')", ws, cas)
	one(`INSERT INTO notifications (workspace_id, dedupe_key, kind, channel, recipient)
VALUES ($1::uuid, 'n1', 'alert.created', 'email', 'ops@example.com')`, ws)
	ep := one("INSERT INTO webhook_endpoints (workspace_id, url, secret_encrypted) VALUES ($1::uuid, 'https://example.com/hook', '\\x03'::bytea)", ws)
	one(`INSERT INTO webhook_deliveries (workspace_id, endpoint_id, event_type, event_id, payload)
VALUES ($1::uuid, $2::uuid, 'alert.created', gen_random_uuid(), '{}')`, ws, ep)
	one("INSERT INTO notification_subscriptions (workspace_id, channel, recipient) VALUES ($1::uuid, 'email', 'ops@example.com')", ws)
}

// workspaceTables lists every table and partition of the schema that has a
// workspace_id column, straight from the catalogue.
func workspaceTables(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
SELECT format('%I.%I', n.nspname, c.relname)
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'workspace_id' AND NOT a.attisdropped
 WHERE n.nspname = 'speculapro' AND c.relkind IN ('r', 'p')
 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

func isRLSViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501" && strings.Contains(pgErr.Message, "row-level security")
}

func TestMigratedSchemaIsolatesEveryWorkspaceTable(t *testing.T) {
	ctx := context.Background()
	d := dbtest.New(t)
	super := d.Connect(t, d.SuperuserURL)
	system := d.Connect(t, d.SystemURL)
	app := d.Connect(t, d.AppURL)

	wsA, wsB := newUUID(t, super), newUUID(t, super)
	seedWorkspace(t, super, wsA)
	seedWorkspace(t, super, wsB)

	tables := workspaceTables(t, super)
	if len(tables) < 20 {
		t.Fatalf("found only %d workspace tables and partitions: %v", len(tables), tables)
	}
	for _, table := range tables {
		t.Run(table, func(t *testing.T) {
			var rls bool
			var policies int
			if err := super.QueryRow(ctx, `SELECT c.relrowsecurity, (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid)
FROM pg_class c WHERE c.oid = $1::regclass`, table).Scan(&rls, &policies); err != nil {
				t.Fatal(err)
			}
			if !rls || policies == 0 {
				t.Fatalf("%s: row-level security enabled=%v with %d policies; every workspace table needs both", table, rls, policies)
			}

			// The system role sees both workspaces (and the seed gave each a row here).
			var nA, nB int
			if err := system.QueryRow(ctx, "SELECT count(*) FILTER (WHERE workspace_id = $1), count(*) FILTER (WHERE workspace_id = $2) FROM "+table,
				wsA, wsB).Scan(&nA, &nB); err != nil {
				t.Fatalf("system reading %s: %v", table, err)
			}
			if nA == 0 || nB == 0 {
				t.Fatalf("system sees %d rows of A and %d of B in %s; seedWorkspace must give every workspace table a row", nA, nB, table)
			}

			// No workspace set: nothing.
			var n int
			if err := app.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
				t.Fatalf("app reading %s with no workspace: %v", table, err)
			}
			if n != 0 {
				t.Fatalf("app with no workspace set sees %d rows of %s, want 0", n, table)
			}

			var rowB string
			if err := system.QueryRow(ctx, "SELECT to_jsonb(t)::text FROM "+table+" t WHERE workspace_id = $1 LIMIT 1", wsB).Scan(&rowB); err != nil {
				t.Fatal(err)
			}

			tx, err := app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, "SELECT set_config('speculapro.workspace_id', $1, true)", wsA); err != nil {
				t.Fatal(err)
			}
			var own, others int
			if err := tx.QueryRow(ctx, "SELECT count(*) FILTER (WHERE workspace_id = $1), count(*) FILTER (WHERE workspace_id <> $1) FROM "+table,
				wsA).Scan(&own, &others); err != nil {
				t.Fatalf("app reading %s: %v", table, err)
			}
			if own != nA || others != 0 {
				t.Fatalf("app in workspace A sees %d of A's %d rows and %d other rows in %s", own, nA, others, table)
			}

			// Each attempt runs in a savepoint so a refusal does not end the transaction.
			attempt := func(sql string, args ...any) (int64, error) {
				sp, err := tx.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				tag, err := sp.Exec(ctx, sql, args...)
				if err != nil {
					_ = sp.Rollback(ctx)
					return 0, err
				}
				if err := sp.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				return tag.RowsAffected(), nil
			}

			if got, err := attempt("UPDATE "+table+" SET workspace_id = workspace_id WHERE workspace_id = $1", wsA); err != nil || got != int64(nA) {
				t.Fatalf("app updating its own rows of %s: %d rows, %v; want %d", table, got, err, nA)
			}
			if got, err := attempt("UPDATE "+table+" SET workspace_id = workspace_id WHERE workspace_id = $1", wsB); err != nil || got != 0 {
				t.Fatalf("app in A updating B's rows of %s: %d rows, %v; want 0", table, got, err)
			}
			if got, err := attempt("DELETE FROM "+table+" WHERE workspace_id = $1", wsB); err != nil || got != 0 {
				t.Fatalf("app in A deleting B's rows of %s: %d rows, %v; want 0", table, got, err)
			}
			if _, err := attempt("UPDATE "+table+" SET workspace_id = $2 WHERE workspace_id = $1", wsA, wsB); !isRLSViolation(err) {
				t.Fatalf("app in A moving a row of %s to B = %v, want a row-level security violation", table, err)
			}
			if _, err := attempt("INSERT INTO "+table+" SELECT * FROM jsonb_populate_record(NULL::"+table+", $1::jsonb)", rowB); !isRLSViolation(err) {
				t.Fatalf("app in A inserting a row of B into %s = %v, want a row-level security violation", table, err)
			}
		})
	}
}

func TestMigratedSchemaIsolatesWorkspacesAndHonoursSessionSetting(t *testing.T) {
	ctx := context.Background()
	d := dbtest.New(t)
	super := d.Connect(t, d.SuperuserURL)
	wsA, wsB := newUUID(t, super), newUUID(t, super)
	seedWorkspace(t, super, wsA)
	seedWorkspace(t, super, wsB)
	app := d.Connect(t, d.AppURL)

	// An API key is resolved before any workspace is set, without seeing other keys.
	var resolved string
	if err := app.QueryRow(ctx, "SELECT workspace_for_api_key(sha256(convert_to($1::text, 'UTF8')))::text", "key-"+wsB).Scan(&resolved); err != nil || resolved != wsB {
		t.Fatalf("workspace_for_api_key = %q, %v; want %s", resolved, err, wsB)
	}

	// The session form: SET speculapro.workspace_id.
	if _, err := app.Exec(ctx, "SET speculapro.workspace_id = '"+wsA+"'"); err != nil {
		t.Fatal(err)
	}
	rows, err := app.Query(ctx, "SELECT id::text FROM workspaces")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != 1 || ids[0] != wsA {
		t.Fatalf("app in A sees workspaces %v (%v), want only %s", ids, err, wsA)
	}
	if _, err := app.Exec(ctx, "INSERT INTO workspaces (id, name) VALUES ($1, 'intruder')", newUUID(t, super)); !isRLSViolation(err) {
		t.Fatalf("app in A creating another workspace = %v, want a row-level security violation", err)
	}
	if _, err := app.Exec(ctx, "INSERT INTO customers (id, workspace_id, external_id) VALUES (gen_random_uuid(), $1, 'new')", wsA); err != nil {
		t.Fatalf("app in A creating a customer of A: %v", err)
	}
	if _, err := app.Exec(ctx, "RESET speculapro.workspace_id"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := app.QueryRow(ctx, "SELECT count(*) FROM customers").Scan(&n); err != nil || n != 0 {
		t.Fatalf("app after RESET sees %d customers (%v), want 0", n, err)
	}
}
