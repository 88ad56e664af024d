package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate"
)

// DB is one test's database and the URLs that reach it as each role.
type DB struct {
	Name         string
	SuperuserURL string // the test superuser, connected to this database
	OwnerURL     string // speculapro_owner
	AppURL       string // speculapro_app (row-level security applies)
	SystemURL    string // speculapro_system (BYPASSRLS)
}

// New returns a fresh database, bootstrapped and migrated, that is dropped
// when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	d := NewBootstrapped(t)
	d.migrate(t)
	return d
}

// NewOn bootstraps and migrates database name on the server superuserURL
// reaches: a private server a test stops and starts, whose whole data
// directory goes when t ends, so the database is not dropped.
func NewOn(t testing.TB, superuserURL, name string) *DB {
	t.Helper()
	d := bootstrap(t, superuserURL, name)
	d.migrate(t)
	return d
}

// NewBootstrapped returns a fresh database with roles, schema and
// search_path in place but no migration applied, dropped when t ends.
func NewBootstrapped(t testing.TB) *DB {
	t.Helper()
	super := testenv.PostgresSuperuserURL(t)
	name := uniqueName(t)
	t.Cleanup(func() { Drop(t, super, name) })
	return bootstrap(t, super, name)
}

// bootstrap creates database name with the standard roles (their passwords
// are their names, as on the local stack) on the server super reaches.
func bootstrap(t testing.TB, super, name string) *DB {
	t.Helper()
	d := &DB{
		Name:         name,
		SuperuserURL: testenv.WithDatabase(t, super, name),
		OwnerURL:     RoleURL(t, super, dbmigrate.OwnerRole, name),
		AppURL:       RoleURL(t, super, dbmigrate.AppRole, name),
		SystemURL:    RoleURL(t, super, dbmigrate.SystemRole, name),
	}
	err := dbmigrate.Bootstrap(context.Background(), dbmigrate.BootstrapConfig{
		SuperuserURL:   super,
		Database:       name,
		OwnerPassword:  dbmigrate.OwnerRole,
		AppPassword:    dbmigrate.AppRole,
		SystemPassword: dbmigrate.SystemRole,
	}, nil)
	if err != nil {
		t.Fatalf("bootstrapping test database %s: %v", name, err)
	}
	return d
}

// migrate applies every migration as the owner, on a connection closed
// before it returns (a test that stops the server must not find it open).
func (d *DB) migrate(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.OwnerURL)
	if err != nil {
		t.Fatalf("connecting to test database %s: %v", d.Name, err)
	}
	defer conn.Close(context.Background())
	if _, err := dbmigrate.Migrate(context.Background(), conn, time.Now(), nil); err != nil {
		t.Fatalf("migrating test database %s: %v", d.Name, err)
	}
}

// Connect opens a connection that is closed when t ends.
func (d *DB) Connect(t testing.TB, rawURL string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		t.Fatalf("connecting to test database %s: %v", d.Name, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// RoleURL rewrites a PostgreSQL URL to log in as one of the standard roles
// with its local-stack password (the role's name) into database db.
func RoleURL(t testing.TB, pgURL, role, db string) string {
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatalf("parsing PostgreSQL URL: %v", err)
	}
	u.User = url.UserPassword(role, role)
	u.Path = "/" + db
	return u.String()
}

// Drop removes database name, disconnecting whoever is still connected.
func Drop(t testing.TB, superuserURL, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, superuserURL)
	if err != nil {
		t.Errorf("dropping test database %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("dropping test database %s: %v", name, err)
	}
}

// uniqueName is sp_<test name>_<random>, within PostgreSQL's 63 bytes.
func uniqueName(t testing.TB) string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	base := b.String()
	if len(base) > 40 {
		base = base[:40]
	}
	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	return "sp_" + base + "_" + hex.EncodeToString(suffix)
}
