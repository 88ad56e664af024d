package dbmigrate_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

func allMigrationNames(t *testing.T) []string {
	t.Helper()
	all, err := dbmigrate.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range all {
		names = append(names, m.Name)
	}
	return names
}

// catalogue is a text snapshot of everything a migration can change: tables,
// columns, indexes, constraints, policies, grants, default privileges,
// functions and per-database settings.
func catalogue(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	const q = `
SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' rls=' || c.relrowsecurity || ' force=' || c.relforcerowsecurity
       || ' owner=' || pg_get_userbyid(c.relowner) || ' acl=' || coalesce(c.relacl::text, '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'speculapro'
UNION ALL
SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' notnull=' || a.attnotnull || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE n.nspname = 'speculapro' AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'idx ' || indexdef FROM pg_indexes WHERE schemaname = 'speculapro'
UNION ALL
SELECT 'con ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = 'speculapro'::regnamespace
UNION ALL
SELECT 'pol ' || tablename || ' ' || policyname || ' ' || array_to_string(roles, ',') || ' ' || cmd
       || ' using=' || coalesce(qual, '') || ' check=' || coalesce(with_check, '')
  FROM pg_policies WHERE schemaname = 'speculapro'
UNION ALL
SELECT 'defacl ' || pg_get_userbyid(defaclrole) || ' ' || coalesce(defaclnamespace::regnamespace::text, '-')
       || ' ' || defaclobjtype::text || ' ' || defaclacl::text
  FROM pg_default_acl
UNION ALL
SELECT 'fn ' || p.oid::regprocedure || ' definer=' || p.prosecdef || ' acl=' || coalesce(p.proacl::text, '')
       || ' config=' || coalesce(array_to_string(p.proconfig, ','), '')
  FROM pg_proc p WHERE p.pronamespace = 'speculapro'::regnamespace
UNION ALL
SELECT 'nsp ' || nspname || ' owner=' || pg_get_userbyid(nspowner) || ' acl=' || coalesce(nspacl::text, '')
  FROM pg_namespace WHERE nspname = 'speculapro'
UNION ALL
SELECT 'setting ' || coalesce(pg_get_userbyid(s.setrole), '-') || ' ' || array_to_string(s.setconfig, ',')
  FROM pg_db_role_setting s WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
UNION ALL
SELECT 'ledger ' || version || ' ' || name || ' ' || encode(checksum, 'hex') FROM speculapro.schema_migrations`
	rows, err := conn.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("reading the catalogue: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("reading the catalogue: %v", err)
	}
	slices.Sort(lines)
	return lines
}

func TestMigrateBootstrapThenAgainChangesNothing(t *testing.T) {
	ctx := context.Background()
	d := dbtest.NewBootstrapped(t)
	owner := d.Connect(t, d.OwnerURL)

	var printed []string
	res, err := dbmigrate.Migrate(ctx, owner, time.Now(), func(name string) { printed = append(printed, name) })
	if err != nil {
		t.Fatalf("first migrate: %v", err)
	}
	want := allMigrationNames(t)
	if !slices.Equal(res.Applied, want) || !slices.Equal(printed, want) {
		t.Fatalf("first migrate applied %v (reported %v), want every file in order %v", res.Applied, printed, want)
	}
	if len(res.Partitions) != 2*5 {
		t.Fatalf("first migrate created partitions %v, want 5 months of 2 tables", res.Partitions)
	}
	before := catalogue(t, d.Connect(t, d.SuperuserURL))

	// Bootstrap again (existing roles and database), then migrate again.
	super := testenv.PostgresSuperuserURL(t)
	if err := dbmigrate.Bootstrap(ctx, dbmigrate.BootstrapConfig{
		SuperuserURL: super, Database: d.Name,
		OwnerPassword: dbmigrate.OwnerRole, AppPassword: dbmigrate.AppRole, SystemPassword: dbmigrate.SystemRole,
	}, func(line string) { t.Errorf("second bootstrap reported %q, want nothing", line) }); err != nil {
		t.Fatalf("second bootstrap: %v", err)
	}
	res, err = dbmigrate.Migrate(ctx, d.Connect(t, d.OwnerURL), time.Now(), func(name string) {
		t.Errorf("second migrate applied %s, want nothing", name)
	})
	if err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if len(res.Applied) != 0 || len(res.Partitions) != 0 {
		t.Fatalf("second migrate changed %+v, want nothing", res)
	}
	after := catalogue(t, d.Connect(t, d.SuperuserURL))
	if !slices.Equal(before, after) {
		t.Fatalf("catalogue changed on the second run:\n%s", diff(before, after))
	}
	if len(before) < 200 {
		t.Fatalf("catalogue snapshot has only %d lines; the snapshot query is not seeing the schema", len(before))
	}
}

func diff(a, b []string) string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

func TestMigrateRefusesAnyRoleButOwner(t *testing.T) {
	d := dbtest.NewBootstrapped(t)
	for _, tc := range []struct{ role, url string }{
		{"speculapro_app", d.AppURL},
		{"speculapro_system", d.SystemURL},
		{"superuser", d.SuperuserURL},
	} {
		t.Run(tc.role, func(t *testing.T) {
			_, err := dbmigrate.Migrate(context.Background(), d.Connect(t, tc.url), time.Now(), nil)
			if !errors.Is(err, dbmigrate.ErrNotOwner) {
				t.Fatalf("Migrate as %s = %v, want ErrNotOwner", tc.role, err)
			}
			if !strings.Contains(err.Error(), "must run as speculapro_owner") || !strings.Contains(err.Error(), "SP_DB_OWNER_URL") {
				t.Fatalf("refusal %q does not say which role and setting to use", err)
			}
		})
	}
	var ledger *string
	if err := d.Connect(t, d.SuperuserURL).QueryRow(context.Background(),
		"SELECT to_regclass('speculapro.schema_migrations')::text").Scan(&ledger); err != nil {
		t.Fatal(err)
	}
	if ledger != nil {
		t.Fatalf("a refused migrate created %s", *ledger)
	}
}

func TestMigrateConcurrentRunsApplyEachFileOnce(t *testing.T) {
	d := dbtest.NewBootstrapped(t)
	const runs = 3
	conns := make([]*pgx.Conn, runs)
	for i := range conns {
		conns[i] = d.Connect(t, d.OwnerURL)
	}
	var mu sync.Mutex
	var applied []string
	var wg sync.WaitGroup
	errs := make([]error, runs)
	for i := range runs {
		wg.Add(1)
		// Each goroutine owns conns[i] and errs[i]; wg.Wait bounds its life.
		go func() {
			defer wg.Done()
			res, err := dbmigrate.Migrate(context.Background(), conns[i], time.Now(), nil)
			errs[i] = err
			mu.Lock()
			applied = append(applied, res.Applied...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent migrate %d: %v", i, err)
		}
	}
	slices.Sort(applied)
	if want := allMigrationNames(t); !slices.Equal(applied, want) {
		t.Fatalf("concurrent runs applied %v between them, want each of %v exactly once", applied, want)
	}
}

func TestMigrateRefusesEditedOrUnknownMigrations(t *testing.T) {
	ctx := context.Background()
	d := dbtest.New(t)
	owner := d.Connect(t, d.OwnerURL)

	if _, err := owner.Exec(ctx, "UPDATE speculapro.schema_migrations SET checksum = '\\x00' WHERE version = 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := dbmigrate.Migrate(ctx, owner, time.Now(), nil); !errors.Is(err, dbmigrate.ErrChecksumMismatch) {
		t.Fatalf("Migrate after a file changed = %v, want ErrChecksumMismatch", err)
	}
	if _, err := owner.Exec(ctx, "INSERT INTO speculapro.schema_migrations (version, name, checksum) VALUES (99999, '99999_future.sql', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	if _, err := dbmigrate.Migrate(ctx, owner, time.Now(), nil); !errors.Is(err, dbmigrate.ErrUnknownMigration) {
		t.Fatalf("Migrate of a database from a newer version = %v, want ErrUnknownMigration", err)
	}
}

// TestMigratedSchemaTablesNotCreatedByOwnerDenySystem is the persister's
// documented `permission denied` case (docs/operations.md, "Always run
// migrations as speculapro_owner"): grants come from the owner's default privileges, so a table
// created by any other role (here the superuser, as a migration run with the
// wrong URL would) is not writable by speculapro_system.
func TestMigratedSchemaTablesNotCreatedByOwnerDenySystem(t *testing.T) {
	ctx := context.Background()
	d := dbtest.New(t)
	super := d.Connect(t, d.SuperuserURL)
	if _, err := super.Exec(ctx, "CREATE TABLE speculapro.made_by_superuser (id uuid PRIMARY KEY, workspace_id uuid NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	owner := d.Connect(t, d.OwnerURL)
	if _, err := owner.Exec(ctx, "CREATE TABLE speculapro.made_by_owner (id uuid PRIMARY KEY, workspace_id uuid NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	system := d.Connect(t, d.SystemURL)

	_, err := system.Exec(ctx, "INSERT INTO speculapro.made_by_superuser VALUES (gen_random_uuid(), gen_random_uuid())")
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("system insert into a table the superuser created = %v, want permission denied", err)
	}
	if _, err := system.Exec(ctx, "INSERT INTO speculapro.made_by_owner VALUES (gen_random_uuid(), gen_random_uuid())"); err != nil {
		t.Fatalf("system insert into a table the owner created: %v", err)
	}
}

func TestMigratedSchemaPartitionsCoverTheWindowAndNothingElse(t *testing.T) {
	ctx := context.Background()
	d := dbtest.New(t)
	super := d.Connect(t, d.SuperuserURL)
	now := time.Now().UTC()

	var want []string
	first, months := dbmigrate.PartitionWindow(now)
	for _, table := range []string{"account_events", "transactions"} {
		for i := range months {
			want = append(want, fmt.Sprintf("%s_p%s", table, first.AddDate(0, i, 0).Format("2006_01")))
		}
	}
	rows, err := super.Query(ctx, `
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent IN ('speculapro.transactions'::regclass, 'speculapro.account_events'::regclass) ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("partitions = %v, want %v (last month to three months ahead, no default)", got, want)
	}

	system := d.Connect(t, d.SystemURL)
	ws := seedWorkspaceRow(t, super)
	insert := `INSERT INTO transactions (id, workspace_id, external_id, account_id, customer_id, amount, currency, direction, occurred_at)
VALUES ($1, $2, 'ext-1', gen_random_uuid(), gen_random_uuid(), 12.5, 'EUR', 'out', $3)
ON CONFLICT (id, occurred_at) DO NOTHING`
	for _, at := range []time.Time{first, now, first.AddDate(0, months, 0).Add(-time.Microsecond)} {
		if _, err := system.Exec(ctx, insert, newUUID(t, super), ws, at); err != nil {
			t.Errorf("insert at %v, inside the window: %v", at, err)
		}
	}
	for _, at := range []time.Time{first.Add(-time.Microsecond), first.AddDate(0, months, 0), now.AddDate(1, 0, 0)} {
		_, err := system.Exec(ctx, insert, newUUID(t, super), ws, at)
		if err == nil || !strings.Contains(err.Error(), `no partition of relation "transactions" found`) {
			t.Errorf("insert at %v, outside the window = %v, want no partition of relation \"transactions\" found", at, err)
		}
	}

	// A replay has the same id and occurred_at, lands in the same partition and is skipped.
	id := newUUID(t, super)
	for range 2 {
		if _, err := system.Exec(ctx, insert, id, ws, now); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := system.QueryRow(ctx, "SELECT count(*) FROM transactions WHERE id = $1", id).Scan(&n); err != nil || n != 1 {
		t.Fatalf("a replayed transaction stored %d times (%v), want once", n, err)
	}

	// The worker (speculapro_system) moves the window; what it creates is owned
	// by the owner, granted like every table, and isolated by workspace.
	if created, err := dbmigrate.EnsurePartitions(ctx, system, now); err != nil || len(created) != 0 {
		t.Fatalf("EnsurePartitions on a complete window = %v, %v; want nothing created", created, err)
	}
	later := now.AddDate(0, 2, 0)
	created, err := dbmigrate.EnsurePartitions(ctx, system, later)
	if err != nil {
		t.Fatalf("EnsurePartitions as speculapro_system: %v", err)
	}
	newest := first.AddDate(0, months+1, 0).Format("2006_01")
	if !slices.Contains(created, "transactions_p"+newest) || len(created) != 4 {
		t.Fatalf("EnsurePartitions two months later created %v, want the two new months of both tables", created)
	}
	var owner string
	var rls bool
	if err := super.QueryRow(ctx, "SELECT pg_get_userbyid(relowner), relrowsecurity FROM pg_class WHERE oid = $1::regclass",
		"speculapro.transactions_p"+newest).Scan(&owner, &rls); err != nil {
		t.Fatal(err)
	}
	if owner != dbmigrate.OwnerRole || !rls {
		t.Fatalf("new partition owned by %s with rls=%v, want %s with row-level security", owner, rls, dbmigrate.OwnerRole)
	}
	if _, err := system.Exec(ctx, insert, newUUID(t, super), ws, first.AddDate(0, months+1, 0)); err != nil {
		t.Fatalf("insert into the newly created month: %v", err)
	}

	// speculapro_app may not create partitions.
	app := d.Connect(t, d.AppURL)
	if _, err := dbmigrate.EnsurePartitions(ctx, app, now.AddDate(0, 6, 0)); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("EnsurePartitions as speculapro_app = %v, want permission denied", err)
	}
}

func newUUID(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var id string
	if err := conn.QueryRow(context.Background(), "SELECT gen_random_uuid()::text").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func seedWorkspaceRow(t *testing.T, super *pgx.Conn) string {
	t.Helper()
	var id string
	if err := super.QueryRow(context.Background(), "INSERT INTO workspaces (name) VALUES ('seed') RETURNING id::text").Scan(&id); err != nil {
		t.Fatalf("creating a workspace: %v", err)
	}
	return id
}

// Several workers may move the window at once; each partition is created once.
func TestMigratedSchemaConcurrentEnsurePartitions(t *testing.T) {
	d := dbtest.New(t)
	const workers = 3
	conns := make([]*pgx.Conn, workers)
	for i := range conns {
		conns[i] = d.Connect(t, d.SystemURL)
	}
	later := time.Now().AddDate(0, 6, 0)
	var mu sync.Mutex
	var created []string
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i := range workers {
		wg.Add(1)
		// Each goroutine owns conns[i] and errs[i]; wg.Wait bounds its life.
		go func() {
			defer wg.Done()
			names, err := dbmigrate.EnsurePartitions(context.Background(), conns[i], later)
			errs[i] = err
			mu.Lock()
			created = append(created, names...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent EnsurePartitions %d: %v", i, err)
		}
	}
	// The window after six months overlaps the initial one (last month .. +3)
	// by nothing: all 5 months of both tables are new, each created once.
	sorted := slices.Clone(created)
	slices.Sort(sorted)
	if len(sorted) != 10 || len(slices.Compact(sorted)) != 10 {
		t.Fatalf("concurrent EnsurePartitions created %v, want 10 distinct partitions", created)
	}
}
