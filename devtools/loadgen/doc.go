// Package loadgen owns SpeculaPro's synthetic transaction traffic: a
// deterministic generator of realistic transaction envelopes (many accounts
// spread over workspaces, some of them "known" real customers and accounts,
// counterparties drawn from a per-workspace pool with a heavy head, a share of
// them paying a monitored account's own IBAN so linking can be checked), the
// producer that sends them to Kafka at a given rate with a progress display,
// the seeding of the known customers and accounts into PostgreSQL, and the
// manifest from which a test recomputes exactly what was sent. It also makes
// account events over the same customers (sign-ins, failed one-time codes,
// new devices, SIM swaps, profile changes), some of them incidents that
// large transfers to a mule follow, for the stream's rules. `speculapro
// loadgen`, the persister's and the stream's tests and benchmarks use it.
// Identifiers only ever leave it encrypted, masked and fingerprinted
// (package identity), as they leave the ingest API.
package loadgen
