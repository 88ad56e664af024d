-- 00001_roles: who may do what.
--
-- Three roles, created by `speculapro migrate --bootstrap` (they are
-- cluster-wide, so a migration running as the owner cannot create them):
--   speculapro_owner   owns the schema and every object in it; the only role that runs migrations.
--   speculapro_app     used by API-facing code; bound by row-level security to one workspace per
--                      session (SET speculapro.workspace_id = '<uuid>'); no workspace set = no rows.
--   speculapro_system  BYPASSRLS; used by persist, stream and worker, which write for every workspace.
--
-- The other two roles get their table privileges from DEFAULT PRIVILEGES FOR ROLE speculapro_owner,
-- i.e. only for objects the OWNER creates. A table created by anyone else (a migration run as a
-- superuser, a hand-made table) carries no grant, and persist fails on it with `permission denied`:
-- that is the persister spec's troubleshooting case "Always run migrations as speculapro_owner".
--
-- The schema `speculapro` itself is created by the migration runner before this file (it holds
-- speculapro.schema_migrations, which therefore carries no grant to app or system).

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['speculapro_owner', 'speculapro_app', 'speculapro_system'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            RAISE EXCEPTION 'role % does not exist: run `speculapro migrate --bootstrap` with a superuser URL first', r;
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON SCHEMA speculapro FROM PUBLIC;
GRANT USAGE ON SCHEMA speculapro TO speculapro_app, speculapro_system;

ALTER DEFAULT PRIVILEGES FOR ROLE speculapro_owner IN SCHEMA speculapro
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO speculapro_app, speculapro_system;
ALTER DEFAULT PRIVILEGES FOR ROLE speculapro_owner IN SCHEMA speculapro
    GRANT USAGE, SELECT ON SEQUENCES TO speculapro_app, speculapro_system;
-- Functions are granted one by one: some are SECURITY DEFINER and must not be callable by everyone.
-- (Per-schema default privileges can only add to the global ones, hence no IN SCHEMA here.)
ALTER DEFAULT PRIVILEGES FOR ROLE speculapro_owner
    REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- Sessions of the owner find the tables without qualifying them when it owns the database
-- (bootstrap sets the same search_path per role with ALTER ROLE … IN DATABASE).
DO $$
BEGIN
    IF (SELECT datdba FROM pg_database WHERE datname = current_database())
       = (SELECT oid FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE format('ALTER DATABASE %I SET search_path = speculapro, public', current_database());
    END IF;
END
$$;

-- enable_workspace_isolation puts the one row-level security policy every workspace table has:
-- a session sees and writes only rows of the workspace it names in speculapro.workspace_id.
-- current_setting(…, true) returns NULL when the setting was never set and '' once a transaction
-- that set it locally has ended; NULLIF(…, '') turns both into NULL, and `workspace_id = NULL` is
-- never true: unset means no rows, not an error. A malformed UUID is an error, on purpose.
--
-- RLS is ENABLEd, not FORCEd: the owner (migrations, SECURITY DEFINER maintenance functions) must
-- see every row, app never owns a table so the policy always applies to it, and system bypasses it
-- by design. The policy is for PUBLIC so any future non-owner role without BYPASSRLS is bound too.
CREATE FUNCTION speculapro.enable_workspace_isolation(tbl regclass) RETURNS void
    LANGUAGE plpgsql
    SET search_path = speculapro, pg_temp
AS $fn$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tbl);
    EXECUTE format('DROP POLICY IF EXISTS workspace_isolation ON %s', tbl);
    EXECUTE format(
        'CREATE POLICY workspace_isolation ON %s'
        ' USING (workspace_id = NULLIF(current_setting(''speculapro.workspace_id'', true), '''')::uuid)'
        ' WITH CHECK (workspace_id = NULLIF(current_setting(''speculapro.workspace_id'', true), '''')::uuid)',
        tbl);
END
$fn$;
