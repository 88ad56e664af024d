// Package pgrole owns the startup check of the roles that write for every
// workspace (persist, stream, worker): their database role must be a
// superuser or have BYPASSRLS, or row-level security would silently block
// every write while ingest keeps accepting data.
package pgrole
