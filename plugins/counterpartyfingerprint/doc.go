// Package counterpartyfingerprint holds the counterparty_fingerprint processor, the pipeline
// step that makes sure no clear identifier (IBAN, account number, phone
// number) goes past the ingest API: it replaces each with its encrypted,
// masked and keyed-fingerprint forms and sets the counterparty's
// de-duplication fingerprint. It reads and protects an identifier exactly
// as the ingest API does (internal/identity's ReadClear, ProtectNormalized
// and CounterpartyFingerprint) and edits the message's JSON with
// internal/event's splitter and string encoder, writing anew only the
// objects it changes.
package counterpartyfingerprint
