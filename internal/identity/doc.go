// Package identity owns what SpeculaPro does with account numbers, IBANs and
// phone numbers so that none of them is stored, logged or put on Kafka in
// clear: it normalises an identifier of a known kind (validating an IBAN's
// mod-97 checksum), encrypts it with AES-256-GCM under a key ring whose key id
// prefixes every ciphertext (so keys can rotate), bound to its workspace and
// field and sealed under a key derived per batch (a Sealer: a salt, counted
// nonces), masks it for display, and
// derives the per-workspace, versioned HMAC-SHA256 fingerprint that links a counterparty's
// identifier to a monitored account with the same number without decrypting
// anything, plus the de-duplication fingerprint of a counterparty. Errors name
// the kind and the reason, never the value.
package identity
