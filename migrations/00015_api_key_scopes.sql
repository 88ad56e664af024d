-- 00015_api_key_scopes: what each API key may be used for, and the indexes the case API's pages
-- and case views read.

-- ingest: the ingest API; decide: the decision API; cases: the case API. A key the bank's payment
-- system holds cannot read cases, an analyst tool's key cannot send transactions. Every key that
-- exists gets ingest and decide: what it could do before keys had scopes.
ALTER TABLE speculapro.api_keys
    ADD COLUMN scopes text[] NOT NULL DEFAULT '{ingest,decide}'
        CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['ingest', 'decide', 'cases']);

-- api_key_grant answers, before a workspace is known, which workspace a key hash belongs to and
-- what the key may do. SECURITY DEFINER like workspace_for_api_key.
CREATE FUNCTION speculapro.api_key_grant(hash bytea) RETURNS TABLE (workspace_id uuid, scopes text[])
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = speculapro, pg_temp
AS $fn$
    SELECT k.workspace_id, k.scopes
      FROM speculapro.api_keys k
      JOIN speculapro.workspaces w ON w.id = k.workspace_id
     WHERE k.key_hash = hash AND k.revoked_at IS NULL AND w.status = 'active'
$fn$;
GRANT EXECUTE ON FUNCTION speculapro.api_key_grant(bytea) TO speculapro_app, speculapro_system;

-- The case API lists a workspace's cases newest first, paged by (opened_at, id); 00014's index
-- serves a list filtered by status, this one a list of every status (filtered by priority,
-- assignee or customer, or not at all), which would otherwise sort all the workspace's cases.
CREATE INDEX cases_opened_idx ON speculapro.cases (workspace_id, opened_at DESC, id DESC);
