package dbmigrate

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/migrations"
)

// The three roles every installation has. Migrations grant by these names.
const (
	OwnerRole  = "speculapro_owner"
	AppRole    = "speculapro_app"
	SystemRole = "speculapro_system"
)

// Schema holds every SpeculaPro table; each role's search_path is `speculapro, public`.
const Schema = "speculapro"

// migrateLockKey is the pg_advisory_lock key held while migrating, so two
// `speculapro migrate` runs against one database apply each file once.
const migrateLockKey int64 = 0x5350_4d49_4752_4154 // "SPMIGRAT"

// Errors a caller may classify with errors.Is.
var (
	// ErrNotOwner: migrate connected as a role other than speculapro_owner.
	// Tables created by any other role would carry none of the grants that
	// app and system need, so migrate refuses instead.
	ErrNotOwner = errors.New("migrations must run as " + OwnerRole + ", the role that owns the schema (set SP_DB_OWNER_URL to the " + OwnerRole + " role)")
	// ErrChecksumMismatch: a migration file changed after it was applied.
	ErrChecksumMismatch = errors.New("migration file changed after it was applied; add a new migration instead of editing a released one")
	// ErrUnknownMigration: the database has a migration this binary does not
	// ship, i.e. a newer speculapro migrated it.
	ErrUnknownMigration = errors.New("database was migrated by a newer speculapro; run that version's migrate")
)

// Migration is one embedded SQL file.
type Migration struct {
	Version  int    // the file's number, 1 for 00001_roles.sql
	Name     string // the file name, e.g. 00001_roles.sql
	SQL      string
	Checksum []byte // SHA-256 of SQL
}

// Result says what a Migrate run changed.
type Result struct {
	Applied    []string // file names applied by this run, in order
	Partitions []string // partitions created by this run
}

var fileName = regexp.MustCompile(`^(\d{5})_[a-z0-9_]+\.sql$`)

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	return load(migrations.FS)
}

func load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("listing embedded migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q is not named NNNNN_name.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", other, e.Name(), v)
		}
		seen[v] = e.Name()
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", e.Name(), err)
		}
		sum := sha256.Sum256(body)
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(body), Checksum: sum[:]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrate applies every embedded migration not yet recorded in
// speculapro.schema_migrations, in order, each in its own transaction, then
// makes sure the partitions around now exist. It refuses unless conn is
// speculapro_owner. It holds a session advisory lock throughout, so it takes
// a dedicated connection, not a pool. applied, if not nil, is called after
// each file commits. Running it again on an up-to-date database changes
// nothing.
func Migrate(ctx context.Context, conn *pgx.Conn, now time.Time, applied func(name string)) (Result, error) {
	var res Result
	all, err := Migrations()
	if err != nil {
		return res, err
	}

	var user string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil {
		return res, fmt.Errorf("asking the database which role this is: %w", err)
	}
	if user != OwnerRole {
		return res, fmt.Errorf("refusing to migrate as role %q: %w", user, ErrNotOwner)
	}

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return res, fmt.Errorf("taking the migration lock: %w", err)
	}
	// Unlock with a fresh context: a cancelled ctx must still release the lock
	// when the connection outlives this call.
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", migrateLockKey)
	}()

	// The schema and the ledger come before 00001 because 00001 is recorded in it.
	if _, err := conn.Exec(ctx, `
CREATE SCHEMA IF NOT EXISTS speculapro;
CREATE TABLE IF NOT EXISTS speculapro.schema_migrations (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    checksum    bytea       NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return res, fmt.Errorf("creating speculapro.schema_migrations: %w", err)
	}

	done, err := appliedVersions(ctx, conn)
	if err != nil {
		return res, err
	}
	known := map[int]bool{}
	for _, m := range all {
		known[m.Version] = true
	}
	for v, rec := range done {
		if !known[v] {
			return res, fmt.Errorf("database records migration %s: %w", rec.name, ErrUnknownMigration)
		}
	}

	for _, m := range all {
		if rec, ok := done[m.Version]; ok {
			if string(rec.checksum) != string(m.Checksum) {
				return res, fmt.Errorf("checking migration %s: %w", m.Name, ErrChecksumMismatch)
			}
			continue
		}
		if err := apply(ctx, conn, m); err != nil {
			return res, err
		}
		res.Applied = append(res.Applied, m.Name)
		if applied != nil {
			applied(m.Name)
		}
	}

	res.Partitions, err = EnsurePartitions(ctx, conn, now)
	if err != nil {
		return res, err
	}
	return res, nil
}

type appliedRecord struct {
	name     string
	checksum []byte
}

func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]appliedRecord, error) {
	rows, err := conn.Query(ctx, "SELECT version, name, checksum FROM speculapro.schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("reading speculapro.schema_migrations: %w", err)
	}
	defer rows.Close()
	out := map[int]appliedRecord{}
	for rows.Next() {
		var v int
		var r appliedRecord
		if err := rows.Scan(&v, &r.name, &r.checksum); err != nil {
			return nil, fmt.Errorf("reading speculapro.schema_migrations: %w", err)
		}
		out[v] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading speculapro.schema_migrations: %w", err)
	}
	return out, nil
}

func apply(ctx context.Context, conn *pgx.Conn, m Migration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning migration %s: %w", m.Name, err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// No arguments: pgx sends the file with the simple protocol, which runs
	// several statements in one round trip.
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return fmt.Errorf("applying migration %s: %w", m.Name, err)
	}
	if _, err := tx.Exec(ctx,
		"INSERT INTO speculapro.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
		m.Version, m.Name, m.Checksum); err != nil {
		return fmt.Errorf("recording migration %s: %w", m.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing migration %s: %w", m.Name, err)
	}
	return nil
}
