// Package pgsystem opens the pools of speculapro_system connections the
// persist, stream, worker and decision roles use, in one way for all of
// them: the URL comes from the component's `url` field, falling back to
// its `fallback_url` field (the pipelines set them to `${SP_DB_SYSTEM_URL:}`
// and `${SP_DB_URL:...}`, so `speculapro lint` sees both, and nothing here
// reads the environment); New builds the pool without I/O; Check runs the
// start-up role check from a component's Connect (or first use), waiting
// for PostgreSQL up to the start-up timeout and never past its context;
// RefuseToStart stops the process with the one documented line;
// StartupTimeoutField and OpenFromParsed give the worker's components their
// `startup_timeout` field and their pool from it.
package pgsystem
