package pgcopyupsert

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/speculapro/speculapro/internal/event"
)

// Tables pg_copy_upsert writes.
const (
	tableTransactions  = event.TableTransactions
	tableAccountEvents = event.TableAccountEvents
)

// Staging tables live per connection (created by the pool's AfterConnect) and
// empty themselves at every commit, so using them costs no DDL. Only a replay
// and the isolation of a bad row use them; a first write COPYs directly. Their
// columns are deliberately loose (numeric, text): a value the target column
// refuses then fails the INSERT … SELECT with the target's own error, which
// is what the row is dead-lettered with.
const (
	stagingTransactions  = "sp_persist_txn_staging"
	stagingAccountEvents = "sp_persist_event_staging"

	createStaging = `
CREATE TEMP TABLE IF NOT EXISTS ` + stagingTransactions + ` (
    id uuid, workspace_id uuid, external_id text, account_id uuid, customer_id uuid, counterparty_id uuid,
    amount numeric, currency text, direction text, kind text, status text,
    occurred_at timestamptz, received_at timestamptz, reference text, counterparty_name text, channel text,
    metadata jsonb, decision text, decision_reason text, decision_score numeric, decided_at timestamptz,
    content_hash bytea
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS ` + stagingAccountEvents + ` (
    id uuid, workspace_id uuid, external_id text, kind text, customer_id uuid, account_id uuid,
    occurred_at timestamptz, received_at timestamptz, payload jsonb, content_hash bytea
) ON COMMIT DELETE ROWS`
)

var stagingTxnColumns = []string{
	"id", "workspace_id", "external_id", "account_id", "customer_id", "counterparty_id",
	"amount", "currency", "direction", "kind", "status",
	"occurred_at", "received_at", "reference", "counterparty_name", "channel",
	"metadata", "decision", "decision_reason", "decision_score", "decided_at",
	"content_hash",
}

var stagingEventColumns = []string{
	"id", "workspace_id", "external_id", "kind", "customer_id", "account_id",
	"occurred_at", "received_at", "payload", "content_hash",
}

const (
	insertCustomerPlaceholders = `
INSERT INTO speculapro.customers (id, workspace_id, external_id, placeholder)
SELECT t.id, t.ws, t.ext, true
  FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS t(id, ws, ext)
 WHERE NOT EXISTS (SELECT FROM speculapro.customers c WHERE c.id = t.id)
 ORDER BY t.id
ON CONFLICT DO NOTHING`

	insertAccountPlaceholders = `
INSERT INTO speculapro.accounts (id, workspace_id, external_id, customer_id, placeholder)
SELECT t.id, t.ws, t.ext, t.cust, true
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[]) AS t(id, ws, ext, cust)
 WHERE NOT EXISTS (SELECT FROM speculapro.accounts a WHERE a.id = t.id)
 ORDER BY t.id
ON CONFLICT DO NOTHING`

	// A counterparty is found or created by its fingerprint. Only the
	// missing ones are inserted, and DO NOTHING takes no lock on a row that
	// already exists: an upsert (DO UPDATE … WHERE) locks every conflicting
	// row even when its WHERE is false, so concurrent batches paying the
	// same popular recipients queued behind each other's commits.
	insertCounterparties = `
INSERT INTO speculapro.counterparties
       (id, workspace_id, fingerprint, identifier_kind, identifier_encrypted, identifier_masked, name,
        identifier_fingerprint, account_id, first_seen_at, last_seen_at)
SELECT t.id, t.ws, t.fp, t.kind, t.enc, t.masked, t.name, t.ifp,
       (SELECT a.id FROM speculapro.accounts a
         WHERE a.workspace_id = t.ws AND a.number_fingerprint = t.ifp
         ORDER BY a.placeholder, a.id LIMIT 1),
       t.first_seen, t.last_seen
  FROM unnest($1::uuid[], $2::uuid[], $3::bytea[], $4::text[], $5::bytea[], $6::text[], $7::text[],
              $8::bytea[], $9::timestamptz[], $10::timestamptz[])
       AS t(id, ws, fp, kind, enc, masked, name, ifp, first_seen, last_seen)
 WHERE NOT EXISTS (SELECT FROM speculapro.counterparties c WHERE c.workspace_id = t.ws AND c.fingerprint = t.fp)
 ORDER BY t.id
ON CONFLICT (workspace_id, fingerprint) DO NOTHING`

	// lockCounterpartyLinks takes, shared and in key order, the advisory
	// lock of every identifier fingerprint the statements after it store or
	// look an account up by (migration 00010): an account registered at the
	// same time then either commits before they look (they find it) or
	// waits for this transaction and links the stored counterparty itself.
	lockCounterpartyLinks = `
SELECT count(pg_advisory_xact_lock_shared(k))
  FROM (SELECT DISTINCT speculapro.counterparty_link_key(t.ws, t.ifp) AS k
          FROM unnest($1::uuid[], $2::bytea[]) AS t(ws, ifp)
         ORDER BY 1) AS l`

	// updateCounterparties rewrites the counterparties a batch names that
	// this process does not know to be up to date (knownParties.cps): one
	// that can now be linked to a monitored account (found by the same
	// probe as the insert's), one whose last_seen_at is more than a day
	// behind (a recipient paid 500 times a day is not rewritten, nor
	// locked, 500 times), one whose stored identifier fingerprint is not
	// the payment's (stored before migration 00010, or made under an
	// earlier key). Later links are the accounts' trigger's. The rows to
	// rewrite are locked in id order, the order every writer takes, so two
	// writers cannot deadlock on them. It returns each named counterparty's
	// last_seen_at and identifier fingerprint as they are after it, which
	// the process remembers once the batch commits.
	updateCounterparties = `
WITH t AS (
    SELECT * FROM unnest($1::uuid[], $2::bytea[], $3::bytea[], $4::timestamptz[]) AS t(ws, fp, ifp, last_seen)
), u AS (
    UPDATE speculapro.counterparties AS c
       SET account_id = COALESCE(c.account_id, u.acc),
           last_seen_at = GREATEST(c.last_seen_at, u.last_seen),
           identifier_fingerprint = COALESCE(u.ifp, c.identifier_fingerprint)
      FROM (SELECT e.id, t.last_seen, t.ifp, l.acc
              FROM t
              JOIN speculapro.counterparties e ON e.workspace_id = t.ws AND e.fingerprint = t.fp
              LEFT JOIN LATERAL (SELECT a.id AS acc FROM speculapro.accounts a
                                  WHERE e.account_id IS NULL AND t.ifp IS NOT NULL
                                    AND a.workspace_id = t.ws AND a.number_fingerprint = t.ifp
                                  ORDER BY a.placeholder, a.id LIMIT 1) AS l ON true
             WHERE (e.account_id IS NULL AND l.acc IS NOT NULL)
                OR e.last_seen_at < t.last_seen - interval '24 hours'
                OR e.identifier_fingerprint IS DISTINCT FROM COALESCE(t.ifp, e.identifier_fingerprint)
             ORDER BY e.id
               FOR UPDATE OF e) AS u
     WHERE c.id = u.id
    RETURNING c.id, c.last_seen_at, c.identifier_fingerprint
)
SELECT e.id, COALESCE(u.last_seen_at, e.last_seen_at),
       CASE WHEN u.id IS NULL THEN e.identifier_fingerprint ELSE u.identifier_fingerprint END
  FROM t
  JOIN speculapro.counterparties e ON e.workspace_id = t.ws AND e.fingerprint = t.fp
  LEFT JOIN u ON u.id = e.id`

	lookupAccountCustomers = `SELECT id, customer_id FROM speculapro.accounts WHERE id = ANY($1::uuid[])`

	// The staged moves; a direct write COPYs into the table instead.
	insertTransactions = `
INSERT INTO speculapro.transactions
       (id, workspace_id, external_id, account_id, customer_id, counterparty_id, amount, currency, direction,
        kind, status, occurred_at, received_at, reference, counterparty_name, channel, metadata,
        decision, decision_reason, decision_score, decided_at, content_hash)
SELECT id, workspace_id, external_id, account_id, customer_id, counterparty_id, amount, currency, direction,
       kind, status, occurred_at, COALESCE(received_at, now()), reference, counterparty_name, channel,
       COALESCE(metadata, '{}'), decision, decision_reason, decision_score, decided_at, content_hash
  FROM ` + stagingTransactions + `
ON CONFLICT (id, occurred_at) DO NOTHING`

	// decideStoredTransactions gives a stored transaction without a
	// decision the decision a replayed copy of it carries: a transaction
	// sent through the ingest API and then decided arrives a second time,
	// with its decision, and the insert above skips it. A transaction that
	// has a decision keeps it, as its decisions row keeps the first
	// (insertDecisionsAndWebhooks), so the two always agree. Only a staged
	// write of decided rows runs it: a first delivery COPYs directly, and
	// a decided row it inserts has its decision already. The rows are
	// locked in ID order, every writer's order.
	decideStoredTransactions = `
WITH s AS (
    SELECT id, workspace_id, occurred_at, decision, decision_reason, decision_score, decided_at
      FROM ` + stagingTransactions + `
     WHERE decision IS NOT NULL
), l AS (
    SELECT t.id, t.occurred_at, s.decision, s.decision_reason, s.decision_score, s.decided_at
      FROM speculapro.transactions t
      JOIN s ON t.id = s.id AND t.occurred_at = s.occurred_at AND t.workspace_id = s.workspace_id
     WHERE t.decision IS NULL
     ORDER BY t.id
       FOR UPDATE OF t
)
UPDATE speculapro.transactions AS t
   SET decision = l.decision, decision_reason = l.decision_reason, decision_score = l.decision_score,
       decided_at = l.decided_at
  FROM l
 WHERE t.id = l.id AND t.occurred_at = l.occurred_at AND t.decision IS NULL`

	insertAccountEvents = `
INSERT INTO speculapro.account_events
       (id, workspace_id, external_id, kind, customer_id, account_id, occurred_at, received_at, payload,
        content_hash)
SELECT id, workspace_id, external_id, kind, customer_id, account_id, occurred_at,
       COALESCE(received_at, now()), COALESCE(payload, '{}'), content_hash
  FROM ` + stagingAccountEvents + `
ON CONFLICT (id, occurred_at) DO NOTHING`
)

// writeStats is what one write did.
type writeStats struct {
	stored                int64 // rows inserted into the table
	skipped               int64 // rows already stored (a replay)
	customerPlaceholders  int64
	accountPlaceholders   int64
	counterpartiesCreated int64
	// The customers, accounts and counterparties the write's inserts
	// named, known to exist once it commits; add leaves them out, so a
	// write put together from several (isolating) names none.
	named []namedParty
	// The counterparties the update named, as they stand once the write
	// commits (knownParties.addCounterparties); none from an isolating write.
	counterparties []counterpartyState
}

func (s *writeStats) add(o writeStats) {
	s.stored += o.stored
	s.skipped += o.skipped
	s.customerPlaceholders += o.customerPlaceholders
	s.accountPlaceholders += o.accountPlaceholders
	s.counterpartiesCreated += o.counterpartiesCreated
}

func textOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// jsonOrEmpty is raw, or the empty object the jsonb columns default to.
func jsonOrEmpty(raw []byte) []byte {
	if len(raw) == 0 {
		return emptyJSON
	}
	return raw
}

var emptyJSON = []byte("{}")

// writeTransactions stores rows (already de-duplicated by ID) in tx, moving
// them as mode says. A direct write falls back to staged when a row lacks
// received_at, which the table then defaults to the transaction's time.
func writeTransactions(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, mode writeMode, known *knownParties) (writeStats, error) {
	var stats writeStats
	ph := newPlaceholderSet(known)

	owner, err := ownersOfOrphans(ctx, tx, rows)
	if err != nil {
		return stats, err
	}

	// Keyed by ID, which is the hash of the workspace and fingerprint the
	// table is unique on: a string key of the two cost an allocation a row.
	// The map holds each one's index in cpRows; both, and the fingerprints'
	// bytes, are kept for the next batch (released once the batch is sent).
	sc := newTxnScratch()
	defer sc.release()
	buf := newCopyRowsBuf(len(rows))
	defer buf.release()
	allReceived := true
	for _, e := range rows {
		allReceived = allReceived && !e.ReceivedAt.IsZero()
		accountID, accountKnown := known.id(partyAccount, e.WorkspaceID, e.AccountExternalID)
		var customerID event.UUID
		switch {
		case e.CustomerExternalID != "":
			customerID = ph.customer(e.WorkspaceID, e.CustomerExternalID)
		case owner[accountID] != event.UUID{}:
			customerID = owner[accountID]
		default:
			// A placeholder customer named after the account; the
			// account's real record, when it arrives, points the
			// account at its real customer.
			customerID = ph.customer(e.WorkspaceID, event.OrphanCustomerPrefix+e.AccountExternalID)
		}
		if !accountKnown {
			ph.accountOf(accountID, e.WorkspaceID, e.AccountExternalID, customerID)
		}

		row := txnRow{e: e, account: accountID, customer: customerID}
		if c := e.Counterparty; c != nil {
			if c.Fingerprint != "" {
				id, cpKnown := known.id(partyCounterparty, e.WorkspaceID, c.Fingerprint)
				row.counterparty, row.hasCounterparty = id, true
				sc.noteCounterparty(e, id, cpKnown)
			}
		}

		if err := buf.appendTransaction(row); err != nil {
			return stats, err
		}
	}

	// The rows go in first, the parties last: inserting rows takes no lock
	// another writer waits for, while a placeholder or counterparty just
	// created is waited for by every writer naming it until this
	// transaction commits, which is then only a round trip away.
	b := &pgx.Batch{}
	if mode == writeDirect && !allReceived {
		mode = writeStaged
	}
	if err := copyRows(ctx, tx, b, mode, tableTransactions, len(rows), buf, &stats); err != nil {
		return stats, err
	}
	ph.queue(b, &stats)
	queueCounterparties(b, sc.cpRows, sc, known, &stats)
	// Decided transactions: their decisions rows and decision.created
	// webhooks, in this same transaction (store_decisions.go), and the
	// decision on a row stored before without one.
	if queueDecisions(b, rows) && mode != writeDirect {
		b.Queue(decideStoredTransactions)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return stats, fmt.Errorf("storing %d transactions with their placeholders and counterparties: %w", len(rows), err)
	}
	stats.skipped = int64(len(rows)) - stats.stored
	return stats, nil
}

// ownersOfOrphans looks up the customers of the stored accounts of rows
// that do not name their customer. A transaction that does not name its
// customer belongs to its account's. The account may already be stored (one
// lookup); if not, its placeholder gets a placeholder customer named after
// the account.
func ownersOfOrphans(ctx context.Context, tx pgx.Tx, rows []*event.Envelope) (map[event.UUID]event.UUID, error) {
	var orphans []event.UUID
	for _, e := range rows {
		if e.CustomerExternalID == "" {
			orphans = append(orphans, event.AccountID(e.WorkspaceID, e.AccountExternalID))
		}
	}
	owner := map[event.UUID]event.UUID{}
	if len(orphans) > 0 {
		r, err := tx.Query(ctx, lookupAccountCustomers, orphans)
		if err != nil {
			return nil, fmt.Errorf("looking up the customers of %d accounts: %w", len(orphans), err)
		}
		var acc, cust event.UUID
		_, err = pgx.ForEachRow(r, []any{&acc, &cust}, func() error { owner[acc] = cust; return nil })
		if err != nil {
			return nil, fmt.Errorf("looking up the customers of %d accounts: %w", len(orphans), err)
		}
	}
	return owner, nil
}

// writeMode is how a write moves its rows into the table.
type writeMode int

const (
	// writeDirect COPYs the rows straight into the table, as fast as
	// PostgreSQL loads data. It has no ON CONFLICT, so a row stored before
	// (a replay) fails it with a unique violation: the caller then writes
	// the batch again, staged, in a new transaction.
	writeDirect writeMode = iota
	// writeStaged COPYs the rows into the staging table and moves them with
	// INSERT … SELECT … ON CONFLICT DO NOTHING, skipping stored rows.
	writeStaged
	// writeStagedReuse is writeStaged in a transaction whose staging table
	// may hold rows of an earlier write (isolating a bad row), emptied first.
	writeStagedReuse
)

// copyRows COPYs n rows into the table (direct) or into its staging table
// and queues on b the INSERT … SELECT that moves them (staged), counting
// what it stored in stats.
func copyRows(ctx context.Context, tx pgx.Tx, b *pgx.Batch, mode writeMode, table string, n int, src *copyRowsBuf, stats *writeStats) error {
	staging, columns, insert := stagingTransactions, stagingTxnColumns, insertTransactions
	if table == tableAccountEvents {
		staging, columns, insert = stagingAccountEvents, stagingEventColumns, insertAccountEvents
	}
	if mode == writeStagedReuse {
		if _, err := tx.Exec(ctx, "DELETE FROM "+staging); err != nil {
			return fmt.Errorf("emptying the staging table: %w", err)
		}
	}
	if mode == writeDirect {
		copied, err := copyBinary(ctx, tx, pgx.Identifier{"speculapro", table}, columns, src)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
				return fmt.Errorf("copying %d rows into %s: %w: %w", n, table, errStoredBefore, err)
			}
			return fmt.Errorf("copying %d rows into %s: %w", n, table, err)
		}
		stats.stored = copied
		return nil
	}
	if _, err := copyBinary(ctx, tx, pgx.Identifier{staging}, columns, src); err != nil {
		return fmt.Errorf("copying %d rows into staging: %w", n, err)
	}
	b.Queue(insert).Exec(func(tag pgconn.CommandTag) error {
		stats.stored = tag.RowsAffected()
		return nil
	})
	return nil
}

// writeAccountEvents stores rows (already de-duplicated by ID) in tx; see
// writeTransactions.
func writeAccountEvents(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, mode writeMode, known *knownParties) (writeStats, error) {
	var stats writeStats
	ph := newPlaceholderSet(known)
	buf := newCopyRowsBuf(len(rows))
	defer buf.release()
	allReceived := true
	for _, e := range rows {
		allReceived = allReceived && !e.ReceivedAt.IsZero()
		customerID := ph.customer(e.WorkspaceID, e.CustomerExternalID)
		var accountID *event.UUID
		if e.AccountExternalID != "" {
			id := ph.account(e.WorkspaceID, e.AccountExternalID, customerID)
			accountID = &id
		}
		buf.appendAccountEvent(e, customerID, accountID)
	}
	if mode == writeDirect && !allReceived {
		mode = writeStaged
	}
	b := &pgx.Batch{}
	if err := copyRows(ctx, tx, b, mode, tableAccountEvents, len(rows), buf, &stats); err != nil {
		return stats, err
	}
	ph.queue(b, &stats)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return stats, fmt.Errorf("storing %d account events with their placeholders: %w", len(rows), err)
	}
	stats.skipped = int64(len(rows)) - stats.stored
	return stats, nil
}
