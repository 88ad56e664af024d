-- 00004_transactions: the two high-volume tables, partitioned by calendar month (UTC) of
-- occurred_at, and the function that creates their partitions ahead of time.
--
-- REPLAYS AND UNIQUENESS ACROSS PARTITIONS. A unique index on a partitioned table must include
-- the partition key, so (workspace_id, external_id) cannot be unique across months. Instead:
--   * The row's id is deterministic: a UUID computed from the workspace and the natural key
--     (workspace_id, external_id), whose first bytes are a time prefix taken from occurred_at
--     (time-ordered keys keep B-tree inserts local; the rest is a hash of the natural key).
--   * The same event therefore always has the same id AND the same occurred_at, lands in the same
--     monthly partition, and PRIMARY KEY (id, occurred_at) catches the replay there:
--         INSERT INTO transactions … ON CONFLICT (id, occurred_at) DO NOTHING
--   * What this does NOT catch: the same external_id sent again with a DIFFERENT occurred_at
--     (a new event, as far as the key is concerned). Deduplicating that is the ingest API's job.
-- account_events follow the same rule with their own natural key.
--
-- NO DEFAULT PARTITION, on purpose. A row whose month has no partition fails with
-- `no partition of relation "transactions" found for row`, which the persister retries (the
-- operator runs a worker or calls speculapro.ensure_partitions); the spec's troubleshooting table
-- lists exactly this. A default partition would instead swallow such rows silently and then block
-- creating the month's real partition until its rows were moved by hand.
--
-- No foreign keys here: the persister creates placeholder customers and accounts in the same
-- database transaction as the batch, and a per-row FK check on the hottest table would tax every
-- batch for a guarantee the writer already gives.

CREATE TABLE speculapro.transactions (
    id                 uuid          NOT NULL,
    workspace_id       uuid          NOT NULL,
    external_id        text          NOT NULL,
    account_id         uuid          NOT NULL,
    customer_id        uuid          NOT NULL,
    counterparty_id    uuid,
    amount             numeric(20,4) NOT NULL CHECK (amount >= 0),
    currency           char(3)       NOT NULL,
    direction          text          NOT NULL CHECK (direction IN ('in', 'out')),
    kind               text,                              -- card, transfer, cash, …
    status             text,                              -- pending, completed, reversed, …
    occurred_at        timestamptz   NOT NULL,
    received_at        timestamptz   NOT NULL DEFAULT now(),
    reference          text,
    counterparty_name  text,
    channel            text,                              -- online, pos, atm, branch, …
    metadata           jsonb         NOT NULL DEFAULT '{}',
    -- Carried by a transaction that went through the decision API; NULL otherwise.
    decision           text          CHECK (decision IN ('approve', 'review', 'decline')),
    decision_reason    text,
    decision_score     numeric(9,4),
    decided_at         timestamptz,
    created_at         timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (id, occurred_at)
) PARTITION BY RANGE (occurred_at);

CREATE INDEX transactions_external_idx     ON speculapro.transactions (workspace_id, external_id);
CREATE INDEX transactions_account_idx      ON speculapro.transactions (workspace_id, account_id, occurred_at DESC);
CREATE INDEX transactions_occurred_idx     ON speculapro.transactions (workspace_id, occurred_at DESC);
CREATE INDEX transactions_counterparty_idx ON speculapro.transactions (workspace_id, counterparty_id, occurred_at DESC)
    WHERE counterparty_id IS NOT NULL;
CREATE INDEX transactions_review_idx       ON speculapro.transactions (workspace_id, decided_at)
    WHERE decision = 'review';
SELECT speculapro.enable_workspace_isolation('speculapro.transactions');

CREATE TABLE speculapro.account_events (
    id            uuid        NOT NULL,
    workspace_id  uuid        NOT NULL,
    external_id   text        NOT NULL,
    kind          text        NOT NULL,                   -- customer.created, account.opened, …
    customer_id   uuid        NOT NULL,
    account_id    uuid,
    occurred_at   timestamptz NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now(),
    payload       jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, occurred_at)
) PARTITION BY RANGE (occurred_at);

CREATE INDEX account_events_external_idx ON speculapro.account_events (workspace_id, external_id);
CREATE INDEX account_events_customer_idx ON speculapro.account_events (workspace_id, customer_id, occurred_at DESC);
CREATE INDEX account_events_account_idx  ON speculapro.account_events (workspace_id, account_id, occurred_at DESC)
    WHERE account_id IS NOT NULL;
SELECT speculapro.enable_workspace_isolation('speculapro.account_events');

-- ensure_partitions makes sure `months` monthly partitions starting at from_month's month exist
-- for both tables and returns the names it created. Partitions are named <table>_pYYYY_MM and
-- bounded in UTC. It is SECURITY DEFINER (owned by speculapro_owner, fixed search_path) so the
-- worker, running as speculapro_system, can create partitions that the owner owns: they then get
-- the owner's default privileges, and each gets the workspace policy too, because a partition
-- queried directly is not covered by its parent's policy. Concurrent callers serialise on a
-- transaction-scoped advisory lock. Creating a partition briefly locks its parent, so the worker
-- runs this ahead of time, not on the write path.
CREATE FUNCTION speculapro.ensure_partitions(from_month date, months integer) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = speculapro, pg_temp
AS $fn$
DECLARE
    parent text;
    first  date := date_trunc('month', from_month)::date;
    lo     date;
    hi     date;
    part   text;
BEGIN
    IF months IS NULL OR months < 1 OR months > 120 THEN
        RAISE EXCEPTION 'ensure_partitions: months must be between 1 and 120, got %', months;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('speculapro.ensure_partitions'));
    FOREACH parent IN ARRAY ARRAY['transactions', 'account_events'] LOOP
        FOR i IN 0 .. months - 1 LOOP
            lo   := (first + make_interval(months => i))::date;
            hi   := (lo + interval '1 month')::date;
            part := format('%s_p%s', parent, to_char(lo, 'YYYY_MM'));
            CONTINUE WHEN to_regclass(format('speculapro.%I', part)) IS NOT NULL;
            EXECUTE format('CREATE TABLE speculapro.%I PARTITION OF speculapro.%I FOR VALUES FROM (%L) TO (%L)',
                           part, parent, lo::text || ' 00:00:00+00', hi::text || ' 00:00:00+00');
            PERFORM speculapro.enable_workspace_isolation(format('speculapro.%I', part)::regclass);
            RETURN NEXT part;
        END LOOP;
    END LOOP;
END
$fn$;
GRANT EXECUTE ON FUNCTION speculapro.ensure_partitions(date, integer) TO speculapro_system;
