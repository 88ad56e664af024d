-- 00011_content_hash: every stored transaction and account event keeps the content hash its
-- resends are compared by (the one the ingest API keeps in Redis: 8 bytes of SHA-256 over every
-- field the client sent except occurred_at, the counterparty identifier by its fingerprint). Once
-- the Redis entry of an external_id has expired, the ingest API reads it here, so a resend with
-- other content is still answered `conflict`, not `duplicate`.
--
-- NULL for a row stored before this migration: its first content is unknown, and a resend of it
-- is answered `duplicate` whatever it carries. A nullable column without a default is a change of
-- the catalogue only: no partition is rewritten, and the parents' new column reaches every
-- partition, existing and future.
ALTER TABLE speculapro.transactions ADD COLUMN content_hash bytea;
ALTER TABLE speculapro.account_events ADD COLUMN content_hash bytea;
