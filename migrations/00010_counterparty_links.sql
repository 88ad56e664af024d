-- 00010_counterparty_links: a counterparty is linked to the monitored account with the same
-- number when that account is registered, not by the persister probing every batch's
-- counterparties against the accounts. The probe of every counterparty not yet linked (76 % of
-- a realistic load) on every batch was PostgreSQL's largest cost beyond the COPY itself: 3.8 s
-- of the 1,000,000-row benchmark, about 4 µs per row of the machine's CPU.

-- The keyed fingerprint of the counterparty's identifier, as its latest payment had it (the
-- persister writes it); accounts.number_fingerprint is the same fingerprint of an account's
-- number. NULL for a counterparty stored before this migration until its next payment.
ALTER TABLE speculapro.counterparties ADD COLUMN identifier_fingerprint bytea;
CREATE INDEX counterparties_unlinked_idx ON speculapro.counterparties (workspace_id, identifier_fingerprint)
    WHERE account_id IS NULL AND identifier_fingerprint IS NOT NULL;

-- The advisory lock key of one identifier fingerprint in one workspace. The trigger below takes
-- it exclusively before it links; the persister takes it shared, in a statement of its own,
-- before it stores a counterparty's identifier fingerprint and looks for its account. Whichever
-- comes second then sees the other's committed row: without it, an account registered while a
-- batch stored a new counterparty with its number could each miss the other, for good.
CREATE FUNCTION speculapro.counterparty_link_key(ws uuid, fp bytea) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$ SELECT hashtextextended(ws::text || encode(fp, 'hex'), 0) $fn$;

-- An account written with a number fingerprint links every counterparty of its workspace with
-- that identifier fingerprint that is not linked yet (a link, once made, stays: the same rule
-- as the persister's). It runs as the writer: the ingest API's role sees and updates only its
-- workspace's rows, which are the only ones that can match.
CREATE FUNCTION speculapro.link_counterparties() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = speculapro, pg_temp
AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(speculapro.counterparty_link_key(NEW.workspace_id, NEW.number_fingerprint));
    UPDATE speculapro.counterparties
       SET account_id = NEW.id
     WHERE workspace_id = NEW.workspace_id
       AND identifier_fingerprint = NEW.number_fingerprint
       AND account_id IS NULL;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER accounts_link_counterparties
    AFTER INSERT OR UPDATE OF number_fingerprint ON speculapro.accounts
    FOR EACH ROW WHEN (NEW.number_fingerprint IS NOT NULL)
    EXECUTE FUNCTION speculapro.link_counterparties();

GRANT EXECUTE ON FUNCTION speculapro.counterparty_link_key(uuid, bytea) TO speculapro_app, speculapro_system;
GRANT EXECUTE ON FUNCTION speculapro.link_counterparties() TO speculapro_app, speculapro_system;
