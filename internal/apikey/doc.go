// Package apikey owns the format of SpeculaPro's API keys: how a new key is
// generated (32 random bytes behind a readable "spk_" prefix), the SHA-256
// hash that is the only form stored (speculapro.api_keys.key_hash, looked up
// by speculapro.workspace_for_api_key), and the short non-secret prefix shown
// to users so they can tell their keys apart. A key is printed once, when it
// is created, and never stored or logged in clear.
package apikey
