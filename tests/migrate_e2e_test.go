package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/pgrole"
)

// TestMigrateE2EBootstrapThenUpToDate runs the real binary as an operator
// would on a new installation: `migrate --bootstrap`, then `migrate` again.
func TestMigrateE2EBootstrapThenUpToDate(t *testing.T) {
	t.Parallel()
	super := testenv.PostgresSuperuserURL(t)
	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	name := "sp_e2e_migrate_" + hex.EncodeToString(suffix)
	t.Cleanup(func() { dbtest.Drop(t, super, name) })

	env := map[string]string{
		"SP_DB_SUPERUSER_URL": super,
		"SP_DB_OWNER_URL":     dbtest.RoleURL(t, super, dbmigrate.OwnerRole, name),
		"SP_DB_URL":           dbtest.RoleURL(t, super, dbmigrate.AppRole, name),
		"SP_DB_SYSTEM_URL":    dbtest.RoleURL(t, super, dbmigrate.SystemRole, name),
	}
	all, err := dbmigrate.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var wantApplied []string
	for _, m := range all {
		wantApplied = append(wantApplied, "applied "+m.Name)
	}

	stdout, stderr, code := runBin(t, env, "migrate", "--bootstrap")
	if code != 0 {
		t.Fatalf("migrate --bootstrap exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var applied []string
	createdDB := false
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		switch {
		case strings.HasPrefix(line, "applied "):
			applied = append(applied, line)
		case line == "created database "+name:
			createdDB = true
		case strings.HasPrefix(line, "created role speculapro_"):
			// Roles are cluster-wide: only the first bootstrap on this cluster creates them.
		default:
			t.Errorf("migrate --bootstrap printed unexpected line %q", line)
		}
	}
	if !createdDB || !slices.Equal(applied, wantApplied) {
		t.Fatalf("migrate --bootstrap printed\n%s\nwant \"created database %s\" and, in order,\n%s", stdout, name, strings.Join(wantApplied, "\n"))
	}

	stdout, stderr, code = runBin(t, env, "migrate")
	if code != 0 || stdout != "" {
		t.Fatalf("second migrate exited %d and printed %q (stderr %q); want exit 0 and nothing", code, stdout, stderr)
	}

	// The database is usable as documented: system passes the startup
	// check, every migration is recorded once.
	ctx := context.Background()
	system, err := pgx.Connect(ctx, env["SP_DB_SYSTEM_URL"])
	if err != nil {
		t.Fatalf("connecting as speculapro_system: %v", err)
	}
	defer system.Close(ctx)
	if err := pgrole.RequireBypassRLS(ctx, system); err != nil {
		t.Fatalf("startup check as speculapro_system after bootstrap: %v", err)
	}
	var n int
	if err := system.QueryRow(ctx, "SELECT count(*) FROM speculapro.transactions").Scan(&n); err != nil {
		t.Fatalf("speculapro_system reading transactions: %v", err)
	}

	// migrate with the app role's URL refuses and names the role to use.
	wrong := map[string]string{}
	for k, v := range env {
		wrong[k] = v
	}
	wrong["SP_DB_OWNER_URL"] = env["SP_DB_URL"]
	stdout, stderr, code = runBin(t, wrong, "migrate")
	if code == 0 || stdout != "" || !strings.HasPrefix(stderr, "error: ") || !strings.Contains(stderr, "speculapro_owner") {
		t.Fatalf("migrate as speculapro_app exited %d, stdout %q, stderr %q; want a non-zero exit and `error: …` naming speculapro_owner", code, stdout, stderr)
	}
}
