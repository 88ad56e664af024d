// Package migrations owns SpeculaPro's database schema: numbered SQL files
// (00001_roles.sql, 00002_…) embedded in the binary and applied in order by
// `speculapro migrate` (internal/dbmigrate), each in its own transaction, as
// the speculapro_owner role. Every table lives in the `speculapro` schema; the
// roles' search_path in the database is `speculapro, public`. A file, once
// released, is never edited: the runner refuses a file whose checksum changed
// after it was applied, so a change is always a new, higher-numbered file.
// Files must not contain BEGIN/COMMIT: the runner wraps each one.
package migrations
