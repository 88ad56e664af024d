// Package event owns the versioned JSON envelope that every transaction and
// account event travels in on Kafka (sp.txn.ingested, sp.account.events): its
// Go shape, the one Encode and the one Decode, the classified errors the
// persister dead-letters on, and the deterministic IDs (transactions,
// customers, accounts, counterparties) that let the persister know every row's
// key client-side and make a replay land on the same rows. Identifiers inside
// an envelope are only ever encrypted, masked and fingerprinted (package
// identity); the envelope has no field for a clear one.
package event
