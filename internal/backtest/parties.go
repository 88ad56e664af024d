package backtest

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// parties are the workspace's accounts, customers and counterparties as
// the history's events name them, loaded once before the history is read:
// the history's query then joins nothing, and PostgreSQL sorts only the
// events' own columns. They take memory with the entities, as the totals
// do, not with the events.
type parties struct {
	accounts, customers map[event.UUID]string // id → external id
	// orphans are the placeholder customers the persister stored
	// transactions naming no customer with (event.OrphanCustomerPrefix):
	// the stream counted those transactions on no customer.
	orphans map[event.UUID]bool
	// counterparties hold what the envelope carries of a counterparty but
	// its name (the transaction's own).
	counterparties map[event.UUID]*event.Counterparty
}

// loadParties reads workspace ws's parties.
func loadParties(ctx context.Context, tx pgx.Tx, ws event.UUID) (*parties, error) {
	p := &parties{accounts: map[event.UUID]string{}, customers: map[event.UUID]string{},
		orphans: map[event.UUID]bool{}, counterparties: map[event.UUID]*event.Counterparty{}}
	var id event.UUID
	var ext string
	var placeholder bool
	for what, into := range map[string]map[event.UUID]string{"accounts": p.accounts, "customers": p.customers} {
		rows, err := tx.Query(ctx, `SELECT id, external_id, placeholder FROM speculapro.`+what+` WHERE workspace_id = $1`, ws)
		if err != nil {
			return nil, fmt.Errorf("reading the %s: %w", what, err)
		}
		_, err = pgx.ForEachRow(rows, []any{&id, &ext, &placeholder}, func() error {
			into[id] = ext
			if placeholder && what == "customers" && strings.HasPrefix(ext, event.OrphanCustomerPrefix) {
				p.orphans[id] = true
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading the %s: %w", what, err)
		}
	}
	var kind, masked string
	var fp, enc, identFP []byte
	rows, err := tx.Query(ctx, `SELECT id, fingerprint, coalesce(identifier_kind, ''), identifier_encrypted,
       coalesce(identifier_masked, ''), identifier_fingerprint FROM speculapro.counterparties WHERE workspace_id = $1`, ws)
	if err != nil {
		return nil, fmt.Errorf("reading the counterparties: %w", err)
	}
	_, err = pgx.ForEachRow(rows, []any{&id, &fp, &kind, &enc, &masked, &identFP}, func() error {
		p.counterparties[id] = &event.Counterparty{IdentifierKind: kind, IdentifierEnc: string(enc),
			IdentifierMasked: masked, IdentifierFP: fingerprintText(identFP), Fingerprint: fingerprintText(fp)}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the counterparties: %w", err)
	}
	return p, nil
}
