// Package counterpartyfingerprint holds the counterparty_fingerprint processor, the pipeline
// step that makes sure no clear identifier (IBAN, account number, phone
// number) goes past the ingest API: it replaces each with its encrypted,
// masked and keyed-fingerprint forms and sets the counterparty's
// de-duplication fingerprint, using internal/identity for the cryptography.
package counterpartyfingerprint
