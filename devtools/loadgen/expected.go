package loadgen

import (
	"encoding/hex"

	"github.com/speculapro/speculapro/internal/event"
)

// CounterpartyKey is a counterparty's natural key: its workspace and the hex
// de-duplication fingerprint.
type CounterpartyKey struct {
	Workspace   event.UUID
	Fingerprint string
}

// Expected is what transactions 0..n-1 of a generator must leave in
// PostgreSQL once a persister has stored them (after SeedKnown).
type Expected struct {
	// Transactions: every ID, exactly once.
	Transactions map[event.UUID]struct{}
	// Counterparties: one row per key; the value is the account it must be
	// linked to (a known account paid by its own IBAN), or the zero UUID.
	Counterparties map[CounterpartyKey]event.UUID
	// Accounts and Customers the transactions name, by row ID; true for a
	// known one (seeded as real: placeholder = false), false for one only
	// the persister's placeholder stands for.
	Accounts  map[event.UUID]bool
	Customers map[event.UUID]bool
}

// Expect recomputes what transactions 0..n-1 leave behind. Known accounts
// not named by any transaction are still expected (SeedKnown wrote them).
func (g *Generator) Expect(n int) Expected {
	x := Expected{
		Transactions:   make(map[event.UUID]struct{}, n),
		Counterparties: map[CounterpartyKey]event.UUID{},
		Accounts:       map[event.UUID]bool{},
		Customers:      map[event.UUID]bool{},
	}
	linkedTo := map[CounterpartyKey]event.UUID{}
	for w, pool := range g.pools {
		for _, pe := range pool {
			if pe.linked >= 0 {
				linkedTo[CounterpartyKey{g.workspaces[w], pe.cp.Fingerprint}] = g.accounts[pe.linked].ID()
			}
		}
	}
	for _, a := range g.accounts {
		if a.Known {
			x.Accounts[a.ID()] = true
			x.Customers[a.CustomerID()] = true
		}
	}
	for i := range n {
		e := g.Envelope(i)
		x.Transactions[e.ID] = struct{}{}
		acc := event.AccountID(e.WorkspaceID, e.AccountExternalID)
		if !x.Accounts[acc] {
			x.Accounts[acc] = false
		}
		cust := event.CustomerID(e.WorkspaceID, e.CustomerExternalID)
		if !x.Customers[cust] {
			x.Customers[cust] = false
		}
		if e.Counterparty != nil && e.Counterparty.Fingerprint != "" {
			k := CounterpartyKey{e.WorkspaceID, e.Counterparty.Fingerprint}
			x.Counterparties[k] = linkedTo[k]
		}
	}
	return x
}

// FingerprintHex turns a stored fingerprint (bytea) back into the hex form
// events carry, to compare with CounterpartyKey.Fingerprint.
func FingerprintHex(b []byte) string { return hex.EncodeToString(b) }
