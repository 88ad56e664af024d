-- 00003_parties: customers, their accounts, and the counterparties they pay or are paid by.
--
-- IDs are deterministic: the persister computes them client-side from the workspace and the
-- natural key (UUIDv5-style), so it needs no lookup round trip and a replay maps to the same rows.
-- The natural keys are still UNIQUE so ON CONFLICT can use either.
--
-- placeholder = true marks a row the persister created because a transaction named a customer or
-- account before its own record arrived; the real record clears it (ON CONFLICT … DO UPDATE SET
-- placeholder = false, …).
--
-- Identifiers (account numbers, IBANs, …) are never stored in clear: *_encrypted is AES-256-GCM
-- with a key-id prefix, *_masked is for display, *_fingerprint is HMAC-SHA256 of the normalised
-- value under SP_FINGERPRINT_KEY. The same fingerprint on both sides links a counterparty to an
-- account we monitor without decrypting anything.

CREATE TABLE speculapro.customers (
    id            uuid        PRIMARY KEY,
    workspace_id  uuid        NOT NULL REFERENCES speculapro.workspaces (id),
    external_id   text        NOT NULL,
    placeholder   boolean     NOT NULL DEFAULT false,
    kind          text,                                  -- person, business, …
    name          text,
    country       char(2),
    risk_level    text,
    attributes    jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, external_id)
);
SELECT speculapro.enable_workspace_isolation('speculapro.customers');

CREATE TABLE speculapro.accounts (
    id                  uuid        PRIMARY KEY,
    workspace_id        uuid        NOT NULL REFERENCES speculapro.workspaces (id),
    external_id         text        NOT NULL,
    customer_id         uuid        NOT NULL REFERENCES speculapro.customers (id),
    placeholder         boolean     NOT NULL DEFAULT false,
    kind                text,                            -- current, savings, card, wallet, …
    currency            char(3),
    status              text,
    number_encrypted    bytea,
    number_masked       text,
    number_fingerprint  bytea,
    opened_at           timestamptz,
    closed_at           timestamptz,
    attributes          jsonb       NOT NULL DEFAULT '{}',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, external_id)
);
CREATE INDEX accounts_customer_idx ON speculapro.accounts (workspace_id, customer_id);
-- The join counterparties.fingerprint = accounts.number_fingerprint (within a workspace).
CREATE INDEX accounts_fingerprint_idx ON speculapro.accounts (workspace_id, number_fingerprint)
    WHERE number_fingerprint IS NOT NULL;
SELECT speculapro.enable_workspace_isolation('speculapro.accounts');

CREATE TABLE speculapro.counterparties (
    id                     uuid        PRIMARY KEY,
    workspace_id           uuid        NOT NULL REFERENCES speculapro.workspaces (id),
    fingerprint            bytea       NOT NULL,
    identifier_kind        text,                         -- iban, account_number, phone, card, …
    identifier_encrypted   bytea,
    identifier_masked      text,
    name                   text,
    country                char(2),
    -- Set when the fingerprint matches one of our monitored accounts: the payment stays inside.
    account_id             uuid        REFERENCES speculapro.accounts (id),
    first_seen_at          timestamptz NOT NULL DEFAULT now(),
    last_seen_at           timestamptz NOT NULL DEFAULT now(),
    created_at             timestamptz NOT NULL DEFAULT now(),
    -- Also the index for the join to accounts with the same fingerprint.
    UNIQUE (workspace_id, fingerprint)
);
CREATE INDEX counterparties_account_idx ON speculapro.counterparties (workspace_id, account_id)
    WHERE account_id IS NOT NULL;
SELECT speculapro.enable_workspace_isolation('speculapro.counterparties');
