-- 00002_workspaces: tenants and the API keys that name them.

CREATE TABLE speculapro.workspaces (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text        NOT NULL,
    status      text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The workspace row is its own tenant: its key is `id`, not `workspace_id`.
ALTER TABLE speculapro.workspaces ENABLE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON speculapro.workspaces
    USING (id = NULLIF(current_setting('speculapro.workspace_id', true), '')::uuid)
    WITH CHECK (id = NULLIF(current_setting('speculapro.workspace_id', true), '')::uuid);

-- Only a hash of a key is stored (SHA-256 of the secret part); key_prefix is the non-secret
-- beginning shown to users so they can tell their keys apart.
CREATE TABLE speculapro.api_keys (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id  uuid        NOT NULL REFERENCES speculapro.workspaces (id),
    name          text        NOT NULL,
    key_prefix    text        NOT NULL,
    key_hash      bytea       NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    revoked_at    timestamptz
);
CREATE INDEX api_keys_workspace_idx ON speculapro.api_keys (workspace_id);
SELECT speculapro.enable_workspace_isolation('speculapro.api_keys');

-- workspace_for_api_key answers the one question asked before a workspace is known: which
-- workspace does this key hash belong to? SECURITY DEFINER so an app session with no workspace
-- set can authenticate without seeing any other key.
CREATE FUNCTION speculapro.workspace_for_api_key(hash bytea) RETURNS uuid
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = speculapro, pg_temp
AS $fn$
    SELECT k.workspace_id
      FROM speculapro.api_keys k
      JOIN speculapro.workspaces w ON w.id = k.workspace_id
     WHERE k.key_hash = hash AND k.revoked_at IS NULL AND w.status = 'active'
$fn$;
GRANT EXECUTE ON FUNCTION speculapro.workspace_for_api_key(bytea) TO speculapro_app, speculapro_system;
