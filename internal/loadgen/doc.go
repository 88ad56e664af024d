// Package loadgen owns SpeculaPro's synthetic transaction traffic: a
// deterministic generator of realistic transaction envelopes (many accounts
// spread over workspaces, some of them "known" real customers and accounts,
// counterparties drawn from a per-workspace pool with a heavy head, a share of
// them paying a monitored account's own IBAN so linking can be checked), the
// producer that sends them to Kafka at a given rate with a progress display,
// the seeding of the known customers and accounts into PostgreSQL, and the
// manifest from which a test recomputes exactly what was sent. `speculapro
// loadgen`, the persister's crash test and its benchmarks all use it.
// Identifiers only ever leave it encrypted, masked and fingerprinted
// (package identity), as they leave the ingest API.
package loadgen
