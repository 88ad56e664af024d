package dbmigrate

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/speculapro/speculapro/internal/config"
)

// LocalSystemPassword is speculapro_system's password on the local stack.
// Bootstrap gives it to the role when SP_DB_SYSTEM_URL is unset (persist,
// stream and worker then fall back to SP_DB_URL and refuse to start, so an
// installation that runs them sets SP_DB_SYSTEM_URL anyway).
const LocalSystemPassword = "speculapro_system"

// bootstrapLockKey serialises bootstraps that share a maintenance database:
// roles are cluster-wide, and two sessions altering one role at once fail
// with "tuple concurrently updated".
const bootstrapLockKey int64 = 0x5350_424f_4f54_5354 // "SPBOOTST"

// scramIterations matches PostgreSQL's default scram_iterations.
const scramIterations = 4096

// ErrNotSuperuser: bootstrap was given a URL of a role that is not a superuser.
var ErrNotSuperuser = errors.New("bootstrap needs a superuser URL (SP_DB_SUPERUSER_URL or --superuser-url) to create roles and the database")

// BootstrapConfig is what the one-time bootstrap needs.
type BootstrapConfig struct {
	// SuperuserURL is a superuser's URL naming an existing maintenance
	// database (usually postgres), not the database being created.
	SuperuserURL string
	// Database is the database to create (if missing) and own by speculapro_owner.
	Database string
	// Passwords of the three roles; bootstrap sets them on every run.
	OwnerPassword, AppPassword, SystemPassword string
}

// BootstrapConfigFromSettings takes the role passwords from the URLs of the
// settings that will later connect as those roles (SP_DB_OWNER_URL,
// SP_DB_URL, SP_DB_SYSTEM_URL, the last defaulting to LocalSystemPassword)
// and the database name from SP_DB_OWNER_URL's path.
func BootstrapConfigFromSettings(superuserURL string) (BootstrapConfig, error) {
	cfg := BootstrapConfig{SuperuserURL: superuserURL}
	owner, err := roleCredentials(config.DBOwnerURL, OwnerRole)
	if err != nil {
		return cfg, err
	}
	cfg.Database, cfg.OwnerPassword = owner.Database, owner.Password
	app, err := roleCredentials(config.DBURL, AppRole)
	if err != nil {
		return cfg, err
	}
	cfg.AppPassword = app.Password
	cfg.SystemPassword = LocalSystemPassword
	if config.DBSystemURL.IsSet() {
		sys, err := roleCredentials(config.DBSystemURL, SystemRole)
		if err != nil {
			return cfg, err
		}
		cfg.SystemPassword = sys.Password
	}
	if cfg.Database == "" {
		return cfg, fmt.Errorf("%s names no database to bootstrap", config.DBOwnerURL.Name)
	}
	return cfg, nil
}

func roleCredentials(s config.Setting, role string) (*pgconn.Config, error) {
	c, err := pgconn.ParseConfig(s.Value())
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", s.Name, err)
	}
	if c.User != role {
		return nil, fmt.Errorf("%s connects as %q, but bootstrap sets the password of %s from it: point it at %s", s.Name, c.User, role, role)
	}
	if c.Password == "" {
		return nil, fmt.Errorf("%s has no password for %s", s.Name, role)
	}
	return c, nil
}

// Bootstrap prepares a cluster and database for Migrate: it creates the
// three roles when missing and otherwise resets their attributes and
// passwords, creates the database owned by speculapro_owner when missing,
// the speculapro schema, and each role's search_path in that database. It is
// safe to run again. report, if not nil, is told each object it created.
// It does not migrate: connect as speculapro_owner and call Migrate.
func Bootstrap(ctx context.Context, cfg BootstrapConfig, report func(line string)) error {
	if report == nil {
		report = func(string) {}
	}
	superCfg, err := pgx.ParseConfig(cfg.SuperuserURL)
	if err != nil {
		return fmt.Errorf("parsing the superuser URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, superCfg)
	if err != nil {
		return fmt.Errorf("connecting as superuser to database %q: %w", superCfg.Database, err)
	}
	defer conn.Close(context.Background())

	var super bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		return fmt.Errorf("checking the superuser URL's role: %w", err)
	}
	if !super {
		return fmt.Errorf("role %q is not a superuser: %w", superCfg.User, ErrNotSuperuser)
	}

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", bootstrapLockKey); err != nil {
		return fmt.Errorf("taking the bootstrap lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", bootstrapLockKey)
	}()

	roles := []struct {
		name, password, attrs string
	}{
		{OwnerRole, cfg.OwnerPassword, "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS"},
		{AppRole, cfg.AppPassword, "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS"},
		{SystemRole, cfg.SystemPassword, "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE BYPASSRLS"},
	}
	for _, r := range roles {
		created, err := ensureRole(ctx, conn, r.name, r.password, r.attrs)
		if err != nil {
			return err
		}
		if created {
			report("created role " + r.name)
		}
	}

	created, err := ensureDatabase(ctx, conn, cfg.Database)
	if err != nil {
		return err
	}
	if created {
		report("created database " + cfg.Database)
	}

	dbCfg := superCfg.Copy()
	dbCfg.Database = cfg.Database
	db, err := pgx.ConnectConfig(ctx, dbCfg)
	if err != nil {
		return fmt.Errorf("connecting as superuser to database %q: %w", cfg.Database, err)
	}
	defer db.Close(context.Background())
	stmts := []string{
		fmt.Sprintf("CREATE SCHEMA IF NOT EXISTS %s AUTHORIZATION %s", Schema, OwnerRole),
		fmt.Sprintf("ALTER DATABASE %s SET search_path = %s, public", pgx.Identifier{cfg.Database}.Sanitize(), Schema),
	}
	for _, r := range roles {
		stmts = append(stmts, fmt.Sprintf("ALTER ROLE %s IN DATABASE %s SET search_path = %s, public",
			r.name, pgx.Identifier{cfg.Database}.Sanitize(), Schema))
	}
	for _, s := range stmts {
		if _, err := db.Exec(ctx, s); err != nil {
			return fmt.Errorf("preparing database %q (%s): %w", cfg.Database, s, err)
		}
	}
	return nil
}

// ensureRole creates the role if it is missing, then (always) sets its
// attributes and password, so a re-run repairs a role someone changed. The
// password travels as a SCRAM verifier, so the clear text never reaches the
// server's statement log.
func ensureRole(ctx context.Context, conn *pgx.Conn, name, password, attrs string) (created bool, err error) {
	if password == "" {
		return false, fmt.Errorf("no password for role %s", name)
	}
	verifier, err := scramVerifier(password)
	if err != nil {
		return false, fmt.Errorf("hashing the password of role %s: %w", name, err)
	}
	ident := pgx.Identifier{name}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", name).Scan(&exists); err != nil {
		return false, fmt.Errorf("looking up role %s: %w", name, err)
	}
	if !exists {
		_, err := conn.Exec(ctx, "CREATE ROLE "+ident+" "+attrs+" PASSWORD "+quoteLiteral(verifier))
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			created = true
		case errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.DuplicateObject || pgErr.Code == pgerrcode.UniqueViolation):
			// Another bootstrap (from another maintenance database) won the race; alter below.
		default:
			return false, fmt.Errorf("creating role %s: %w", name, err)
		}
	}
	if !created {
		if _, err := conn.Exec(ctx, "ALTER ROLE "+ident+" "+attrs+" PASSWORD "+quoteLiteral(verifier)); err != nil {
			return false, fmt.Errorf("updating role %s: %w", name, err)
		}
	}
	return created, nil
}

func ensureDatabase(ctx context.Context, conn *pgx.Conn, name string) (created bool, err error) {
	ident := pgx.Identifier{name}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return false, fmt.Errorf("looking up database %q: %w", name, err)
	}
	if !exists {
		// template0: nobody is ever connected to it, so parallel creates cannot
		// fail with "source database is being accessed by other users".
		_, err := conn.Exec(ctx, "CREATE DATABASE "+ident+" OWNER "+OwnerRole+" TEMPLATE template0")
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			created = true
		case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DuplicateDatabase:
		default:
			return false, fmt.Errorf("creating database %q: %w", name, err)
		}
	}
	// A database someone else created still needs these for the schema and
	// for persist's temporary staging tables.
	grants := fmt.Sprintf("GRANT CONNECT, CREATE, TEMPORARY ON DATABASE %s TO %s; GRANT CONNECT, TEMPORARY ON DATABASE %s TO %s, %s",
		ident, OwnerRole, ident, AppRole, SystemRole)
	if _, err := conn.Exec(ctx, grants); err != nil {
		return false, fmt.Errorf("granting access to database %q: %w", name, err)
	}
	return created, nil
}

// scramVerifier computes the SCRAM-SHA-256 verifier PostgreSQL stores for a
// password (RFC 5802/7677), in pg_authid's format.
func scramVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
	if err != nil {
		return "", err
	}
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	serverKey := hmacSHA256(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(storedKey[:]), b64(serverKey)), nil
}

func hmacSHA256(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// quoteLiteral quotes s as an SQL string literal. Only used for values made
// of base64 and fixed characters (no backslashes), where doubling quotes is
// all standard_conforming_strings needs.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
