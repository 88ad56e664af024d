package postgres

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/speculapro/speculapro/internal/event"
)

// Tables pg_copy_upsert writes.
const (
	tableTransactions  = "transactions"
	tableAccountEvents = "account_events"
)

func tableOfKind(k event.Kind) string {
	if k == event.KindAccountEvent {
		return tableAccountEvents
	}
	return tableTransactions
}

// Staging tables live per connection (created by the pool's AfterConnect) and
// empty themselves at every commit, so the happy path costs no DDL. Their
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
    metadata jsonb, decision text, decision_reason text, decision_score numeric, decided_at timestamptz
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS ` + stagingAccountEvents + ` (
    id uuid, workspace_id uuid, external_id text, kind text, customer_id uuid, account_id uuid,
    occurred_at timestamptz, received_at timestamptz, payload jsonb
) ON COMMIT DELETE ROWS`
)

var stagingTxnColumns = []string{
	"id", "workspace_id", "external_id", "account_id", "customer_id", "counterparty_id",
	"amount", "currency", "direction", "kind", "status",
	"occurred_at", "received_at", "reference", "counterparty_name", "channel",
	"metadata", "decision", "decision_reason", "decision_score", "decided_at",
}

var stagingEventColumns = []string{
	"id", "workspace_id", "external_id", "kind", "customer_id", "account_id",
	"occurred_at", "received_at", "payload",
}

const (
	insertCustomerPlaceholders = `
INSERT INTO speculapro.customers (id, workspace_id, external_id, placeholder)
SELECT t.id, t.ws, t.ext, true
  FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS t(id, ws, ext)
 ORDER BY t.id
ON CONFLICT DO NOTHING`

	insertAccountPlaceholders = `
INSERT INTO speculapro.accounts (id, workspace_id, external_id, customer_id, placeholder)
SELECT t.id, t.ws, t.ext, t.cust, true
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[]) AS t(id, ws, ext, cust)
 ORDER BY t.id
ON CONFLICT DO NOTHING`

	// A counterparty is found or created by its fingerprint. An existing one
	// is only rewritten when it can now be linked to a monitored account, or
	// its last_seen_at is more than a day behind: a recipient paid 500 times a
	// day is not rewritten 500 times.
	upsertCounterparties = `
INSERT INTO speculapro.counterparties AS c
       (id, workspace_id, fingerprint, identifier_kind, identifier_encrypted, identifier_masked, name,
        account_id, first_seen_at, last_seen_at)
SELECT t.id, t.ws, t.fp, t.kind, t.enc, t.masked, t.name,
       (SELECT a.id FROM speculapro.accounts a
         WHERE a.workspace_id = t.ws AND a.number_fingerprint = t.ifp
         ORDER BY a.placeholder, a.id LIMIT 1),
       t.first_seen, t.last_seen
  FROM unnest($1::uuid[], $2::uuid[], $3::bytea[], $4::text[], $5::bytea[], $6::text[], $7::text[],
              $8::bytea[], $9::timestamptz[], $10::timestamptz[])
       AS t(id, ws, fp, kind, enc, masked, name, ifp, first_seen, last_seen)
 ORDER BY t.id
ON CONFLICT (workspace_id, fingerprint) DO UPDATE
   SET account_id = COALESCE(c.account_id, EXCLUDED.account_id),
       last_seen_at = GREATEST(c.last_seen_at, EXCLUDED.last_seen_at)
 WHERE (c.account_id IS NULL AND EXCLUDED.account_id IS NOT NULL)
    OR c.last_seen_at < EXCLUDED.last_seen_at - interval '1 day'
RETURNING (xmax = 0) AS created`

	lookupAccountCustomers = `SELECT id, customer_id FROM speculapro.accounts WHERE id = ANY($1::uuid[])`

	insertTransactions = `
INSERT INTO speculapro.transactions
       (id, workspace_id, external_id, account_id, customer_id, counterparty_id, amount, currency, direction,
        kind, status, occurred_at, received_at, reference, counterparty_name, channel, metadata,
        decision, decision_reason, decision_score, decided_at)
SELECT id, workspace_id, external_id, account_id, customer_id, counterparty_id, amount, currency, direction,
       kind, status, occurred_at, COALESCE(received_at, now()), reference, counterparty_name, channel,
       COALESCE(metadata, '{}'), decision, decision_reason, decision_score, decided_at
  FROM ` + stagingTransactions + `
ON CONFLICT (id, occurred_at) DO NOTHING`

	insertAccountEvents = `
INSERT INTO speculapro.account_events
       (id, workspace_id, external_id, kind, customer_id, account_id, occurred_at, received_at, payload)
SELECT id, workspace_id, external_id, kind, customer_id, account_id, occurred_at,
       COALESCE(received_at, now()), COALESCE(payload, '{}')
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
}

func (s *writeStats) add(o writeStats) {
	s.stored += o.stored
	s.skipped += o.skipped
	s.customerPlaceholders += o.customerPlaceholders
	s.accountPlaceholders += o.accountPlaceholders
	s.counterpartiesCreated += o.counterpartiesCreated
}

// naturalKey is a customer's or account's key within its workspace.
type naturalKey struct {
	ws  event.UUID
	ext string
}

// placeholderSet collects the customers and accounts a batch names, once
// each, in a deterministic order.
type placeholderSet struct {
	customers map[event.UUID]naturalKey
	accounts  map[event.UUID]accountRef
}

type accountRef struct {
	naturalKey
	customer event.UUID
}

func newPlaceholderSet() *placeholderSet {
	return &placeholderSet{customers: map[event.UUID]naturalKey{}, accounts: map[event.UUID]accountRef{}}
}

func (p *placeholderSet) customer(ws event.UUID, ext string) event.UUID {
	id := event.CustomerID(ws, ext)
	if _, ok := p.customers[id]; !ok {
		p.customers[id] = naturalKey{ws, ext}
	}
	return id
}

func (p *placeholderSet) account(ws event.UUID, ext string, customer event.UUID) event.UUID {
	id := event.AccountID(ws, ext)
	if _, ok := p.accounts[id]; !ok {
		p.accounts[id] = accountRef{naturalKey{ws, ext}, customer}
	}
	return id
}

// queue adds the placeholder inserts to b, customers first (accounts refer
// to them). Keys are sorted so that concurrent writers naming the same
// customers take their locks in the same order and cannot deadlock.
func (p *placeholderSet) queue(b *pgx.Batch, stats *writeStats) {
	if len(p.customers) > 0 {
		ids := sortedIDs(p.customers)
		wss, exts := make([]event.UUID, len(ids)), make([]string, len(ids))
		for i, id := range ids {
			wss[i], exts[i] = p.customers[id].ws, p.customers[id].ext
		}
		b.Queue(insertCustomerPlaceholders, ids, wss, exts).Exec(func(tag pgconn.CommandTag) error {
			stats.customerPlaceholders += tag.RowsAffected()
			return nil
		})
	}
	if len(p.accounts) > 0 {
		ids := sortedIDs(p.accounts)
		wss, exts, custs := make([]event.UUID, len(ids)), make([]string, len(ids)), make([]event.UUID, len(ids))
		for i, id := range ids {
			a := p.accounts[id]
			wss[i], exts[i], custs[i] = a.ws, a.ext, a.customer
		}
		b.Queue(insertAccountPlaceholders, ids, wss, exts, custs).Exec(func(tag pgconn.CommandTag) error {
			stats.accountPlaceholders += tag.RowsAffected()
			return nil
		})
	}
}

func sortedIDs[V any](m map[event.UUID]V) []event.UUID {
	ids := make([]event.UUID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b event.UUID) int { return strings.Compare(string(a[:]), string(b[:])) })
	return ids
}

// counterpartyRow is one distinct counterparty of a batch.
type counterpartyRow struct {
	id                    event.UUID
	ws                    event.UUID
	fingerprint           []byte
	kind, masked, name    *string
	encrypted, identityFP []byte
	firstSeen, lastSeen   time.Time
}

// fingerprintBytes reads a hex fingerprint; anything else (a fingerprint
// written by another tool) is kept as its bytes, so it still de-duplicates.
func fingerprintBytes(s string) []byte {
	if b, err := hex.DecodeString(s); err == nil {
		return b
	}
	return []byte(s)
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

func jsonOrNil(raw []byte) []byte {
	if len(raw) == 0 {
		return nil
	}
	return raw
}

// writeTransactions stores rows (already de-duplicated by ID) in tx. With
// reuse, the staging table may hold rows of an earlier write in the same
// transaction (isolating a bad row) and is emptied first.
func writeTransactions(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, reuse bool) (writeStats, error) {
	var stats writeStats
	ph := newPlaceholderSet()

	// A transaction that does not name its customer belongs to its
	// account's. The account may already be stored (one lookup); if not, its
	// placeholder gets a placeholder customer named after the account.
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
			return stats, fmt.Errorf("looking up the customers of %d accounts: %w", len(orphans), err)
		}
		var acc, cust event.UUID
		_, err = pgx.ForEachRow(r, []any{&acc, &cust}, func() error { owner[acc] = cust; return nil })
		if err != nil {
			return stats, fmt.Errorf("looking up the customers of %d accounts: %w", len(orphans), err)
		}
	}

	cps := map[string]*counterpartyRow{}
	var cpOrder []string
	copyRows := make([][]any, 0, len(rows))
	for _, e := range rows {
		accountID := event.AccountID(e.WorkspaceID, e.AccountExternalID)
		var customerID event.UUID
		switch {
		case e.CustomerExternalID != "":
			customerID = ph.customer(e.WorkspaceID, e.CustomerExternalID)
		case owner[accountID] != event.UUID{}:
			customerID = owner[accountID]
		default:
			customerID = ph.customer(e.WorkspaceID, orphanCustomerPrefix+e.AccountExternalID)
		}
		ph.account(e.WorkspaceID, e.AccountExternalID, customerID)

		var counterpartyID *event.UUID
		var counterpartyName *string
		if c := e.Counterparty; c != nil {
			counterpartyName = textOrNil(c.Name)
			if c.Fingerprint != "" {
				id := event.CounterpartyID(e.WorkspaceID, c.Fingerprint)
				counterpartyID = &id
				key := string(e.WorkspaceID[:]) + c.Fingerprint
				if cp, ok := cps[key]; ok {
					if e.OccurredAt.Before(cp.firstSeen) {
						cp.firstSeen = e.OccurredAt
					}
					if e.OccurredAt.After(cp.lastSeen) {
						cp.lastSeen = e.OccurredAt
					}
				} else {
					cps[key] = &counterpartyRow{
						id: id, ws: e.WorkspaceID, fingerprint: fingerprintBytes(c.Fingerprint),
						kind: textOrNil(c.IdentifierKind), masked: textOrNil(c.IdentifierMasked), name: textOrNil(c.Name),
						encrypted: bytesOrNil(c.IdentifierEnc),
						firstSeen: e.OccurredAt, lastSeen: e.OccurredAt,
					}
					if c.IdentifierFP != "" {
						cps[key].identityFP = fingerprintBytes(c.IdentifierFP)
					}
					cpOrder = append(cpOrder, key)
				}
			}
		}

		amount, err := decimalToNumeric(e.Amount)
		if err != nil {
			// Decode validated the amount, so this is a bug, not bad data.
			return stats, fmt.Errorf("converting the amount of transaction %s: %w", e.ID, err)
		}
		var decision, reason *string
		var score *float64
		var decidedAt *time.Time
		if d := e.Decision; d != nil {
			decision = textOrNil(string(d.Outcome))
			reason = textOrNil(strings.Join(d.Reasons, ","))
			score = &d.Score
			decidedAt = timeOrNil(d.DecidedAt)
		}
		copyRows = append(copyRows, []any{
			e.ID, e.WorkspaceID, e.ExternalID, accountID, customerID, counterpartyID,
			amount, e.Currency, string(e.Direction), textOrNil(e.Type), textOrNil(e.Status),
			e.OccurredAt, timeOrNil(e.ReceivedAt), textOrNil(e.Reference), counterpartyName, textOrNil(e.Channel),
			jsonOrNil(e.Metadata), decision, reason, score, decidedAt,
		})
	}

	b := &pgx.Batch{}
	if reuse {
		b.Queue("DELETE FROM " + stagingTransactions)
	}
	ph.queue(b, &stats)
	if len(cps) > 0 {
		slices.SortFunc(cpOrder, func(a, b string) int {
			x, y := cps[a].id, cps[b].id
			return strings.Compare(string(x[:]), string(y[:]))
		})
		n := len(cpOrder)
		ids, wss := make([]event.UUID, n), make([]event.UUID, n)
		fps, encs, ifps := make([][]byte, n), make([][]byte, n), make([][]byte, n)
		kinds, maskeds, names := make([]*string, n), make([]*string, n), make([]*string, n)
		firsts, lasts := make([]time.Time, n), make([]time.Time, n)
		for i, key := range cpOrder {
			cp := cps[key]
			ids[i] = cp.id
			wss[i], fps[i], encs[i], ifps[i] = cp.ws, cp.fingerprint, cp.encrypted, cp.identityFP
			kinds[i], maskeds[i], names[i] = cp.kind, cp.masked, cp.name
			firsts[i], lasts[i] = cp.firstSeen, cp.lastSeen
		}
		b.Queue(upsertCounterparties, ids, wss, fps, kinds, encs, maskeds, names, ifps, firsts, lasts).
			Query(func(r pgx.Rows) error {
				var created bool
				_, err := pgx.ForEachRow(r, []any{&created}, func() error {
					if created {
						stats.counterpartiesCreated++
					}
					return nil
				})
				return err
			})
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return stats, fmt.Errorf("creating placeholders and counterparties for %d transactions: %w", len(rows), err)
		}
	}

	n, err := tx.CopyFrom(ctx, pgx.Identifier{stagingTransactions}, stagingTxnColumns, pgx.CopyFromRows(copyRows))
	if err != nil {
		return stats, fmt.Errorf("copying %d transactions into staging: %w", len(rows), err)
	}
	tag, err := tx.Exec(ctx, insertTransactions)
	if err != nil {
		return stats, fmt.Errorf("inserting %d transactions from staging: %w", n, err)
	}
	stats.stored = tag.RowsAffected()
	stats.skipped = int64(len(rows)) - stats.stored
	return stats, nil
}

// orphanCustomerPrefix names the placeholder customer of an account that a
// transaction names without its customer; the account's real record, when
// it arrives, points the account at its real customer.
const orphanCustomerPrefix = "account:"

// writeAccountEvents stores rows (already de-duplicated by ID) in tx; see
// writeTransactions for reuse.
func writeAccountEvents(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, reuse bool) (writeStats, error) {
	var stats writeStats
	ph := newPlaceholderSet()
	copyRows := make([][]any, 0, len(rows))
	for _, e := range rows {
		customerID := ph.customer(e.WorkspaceID, e.CustomerExternalID)
		var accountID *event.UUID
		if e.AccountExternalID != "" {
			id := ph.account(e.WorkspaceID, e.AccountExternalID, customerID)
			accountID = &id
		}
		copyRows = append(copyRows, []any{
			e.ID, e.WorkspaceID, e.ExternalID, e.Type, customerID, accountID,
			e.OccurredAt, timeOrNil(e.ReceivedAt), jsonOrNil(e.Attributes),
		})
	}
	b := &pgx.Batch{}
	if reuse {
		b.Queue("DELETE FROM " + stagingAccountEvents)
	}
	ph.queue(b, &stats)
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return stats, fmt.Errorf("creating placeholders for %d account events: %w", len(rows), err)
		}
	}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{stagingAccountEvents}, stagingEventColumns, pgx.CopyFromRows(copyRows))
	if err != nil {
		return stats, fmt.Errorf("copying %d account events into staging: %w", len(rows), err)
	}
	tag, err := tx.Exec(ctx, insertAccountEvents)
	if err != nil {
		return stats, fmt.Errorf("inserting %d account events from staging: %w", n, err)
	}
	stats.stored = tag.RowsAffected()
	stats.skipped = int64(len(rows)) - stats.stored
	return stats, nil
}
