package loadgen

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/speculapro/speculapro/internal/event"
)

// Execer is what SeedKnown needs of a connection (a *pgx.Conn, a pool or a
// transaction).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SeedStats is what SeedKnown wrote.
type SeedStats struct {
	Workspaces int64 // created (existing ones are left alone)
	Customers  int64 // inserted or turned from placeholder into real
	Accounts   int64
}

// Statements of SeedKnown. The customer and account upserts are what a real
// customer or account record does on arrival: insert, or turn the
// placeholder the persister made into the real record. The accounts go in
// the order of their numbers' link locks (migration 00010), the order in
// which a persister's batch takes them, so a seed beside running persisters
// cannot deadlock with them.
const (
	seedWorkspaces = `
INSERT INTO speculapro.workspaces (id, name)
SELECT t.id, t.name FROM unnest($1::uuid[], $2::text[]) AS t(id, name)
ON CONFLICT (id) DO NOTHING`

	seedCustomers = `
INSERT INTO speculapro.customers AS c (id, workspace_id, external_id, placeholder, kind, name, country)
SELECT t.id, t.ws, t.ext, false, 'person', t.name, 'DE'
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) AS t(id, ws, ext, name)
 ORDER BY t.id
ON CONFLICT (workspace_id, external_id) DO UPDATE
   SET placeholder = false, kind = EXCLUDED.kind, name = EXCLUDED.name, country = EXCLUDED.country,
       updated_at = now()`

	seedAccounts = `
INSERT INTO speculapro.accounts AS a
       (id, workspace_id, external_id, customer_id, placeholder, kind, currency, status,
        number_encrypted, number_masked, number_fingerprint, opened_at)
SELECT t.id, t.ws, t.ext, t.cust, false, 'current', 'EUR', 'active', t.enc, t.masked, t.fp,
       now() - interval '2 years'
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[], $5::bytea[], $6::text[], $7::bytea[])
       AS t(id, ws, ext, cust, enc, masked, fp)
 ORDER BY speculapro.counterparty_link_key(t.ws, t.fp), t.id
ON CONFLICT (workspace_id, external_id) DO UPDATE
   SET placeholder = false, customer_id = EXCLUDED.customer_id, kind = EXCLUDED.kind,
       currency = EXCLUDED.currency, status = EXCLUDED.status,
       number_encrypted = EXCLUDED.number_encrypted, number_masked = EXCLUDED.number_masked,
       number_fingerprint = EXCLUDED.number_fingerprint, opened_at = EXCLUDED.opened_at,
       updated_at = now()`
)

// SeedKnown writes the generator's workspaces, then its known customers and
// accounts as real records (placeholder = false), with each account's IBAN
// encrypted, masked and fingerprinted the way the persister's counterparty
// linking expects (number_fingerprint holds the fingerprint's bytes). It
// needs a role that bypasses row-level security (speculapro_system) and is
// idempotent: running it again changes nothing.
func SeedKnown(ctx context.Context, db Execer, g *Generator) (SeedStats, error) {
	var stats SeedStats
	names := make([]string, len(g.workspaces))
	for w := range g.workspaces {
		names[w] = fmt.Sprintf("loadgen seed %d workspace %d", g.cfg.Seed, w)
	}
	tag, err := db.Exec(ctx, seedWorkspaces, g.workspaces, names)
	if err != nil {
		return stats, fmt.Errorf("seeding %d workspaces: %w", len(g.workspaces), err)
	}
	stats.Workspaces = tag.RowsAffected()

	var (
		custIDs, custWS        []event.UUID
		custExt, custNames     []string
		accIDs, accWS, accCust []event.UUID
		accExt, accMasked      []string
		accEnc, accFP          [][]byte
		lastCustomer           = -1
	)
	for a, acc := range g.accounts {
		if !acc.Known {
			continue
		}
		if cust := a / 2; cust != lastCustomer {
			lastCustomer = cust
			custIDs = append(custIDs, acc.CustomerID())
			custWS = append(custWS, acc.Workspace)
			custExt = append(custExt, acc.CustomerExternalID)
			custNames = append(custNames, acc.CustomerName)
		}
		fp, err := hex.DecodeString(acc.Number.FP)
		if err != nil {
			return stats, fmt.Errorf("seeding account %s: fingerprint is not hex: %w", acc.ExternalID, err)
		}
		accIDs = append(accIDs, acc.ID())
		accWS = append(accWS, acc.Workspace)
		accExt = append(accExt, acc.ExternalID)
		accCust = append(accCust, acc.CustomerID())
		accEnc = append(accEnc, []byte(acc.Number.Enc))
		accMasked = append(accMasked, acc.Number.Masked)
		accFP = append(accFP, fp)
	}
	if len(custIDs) == 0 {
		return stats, nil
	}
	if tag, err = db.Exec(ctx, seedCustomers, custIDs, custWS, custExt, custNames); err != nil {
		return stats, fmt.Errorf("seeding %d known customers: %w", len(custIDs), err)
	}
	stats.Customers = tag.RowsAffected()
	if tag, err = db.Exec(ctx, seedAccounts, accIDs, accWS, accExt, accCust, accEnc, accMasked, accFP); err != nil {
		return stats, fmt.Errorf("seeding %d known accounts: %w", len(accIDs), err)
	}
	stats.Accounts = tag.RowsAffected()
	return stats, nil
}

// SeedKnownURL is SeedKnown over a connection to url, in one transaction so
// a failure leaves nothing half-seeded.
func SeedKnownURL(ctx context.Context, url string, g *Generator) (SeedStats, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return SeedStats{}, fmt.Errorf("connecting to PostgreSQL to seed known accounts: %w", err)
	}
	defer conn.Close(context.Background())
	var stats SeedStats
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		stats, err = SeedKnown(ctx, tx, g)
		return err
	})
	return stats, err
}
