package identity

import (
	"github.com/redpanda-data/benthos/v4/public/service"
)

// Field names of the keys, shared by every plugin that protects identifiers.
const (
	FieldEncryptionKey  = "encryption_key"
	FieldFingerprintKey = "fingerprint_key"
)

// KeyFields are the two key fields every plugin that protects identifiers
// embeds in its spec. They have no default: a pipeline sets them from the
// environment with `${SP_ENCRYPTION_KEY}` and `${SP_FINGERPRINT_KEY}` (no
// default, so a missing key stops `speculapro run` and shows in `speculapro
// lint`), and the plugins never read the environment themselves.
func KeyFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringField(FieldEncryptionKey).
			Description("Key ring for identifier encryption: comma-separated `<key-id>:<64 hex chars>` entries, the first is current (encrypts), all decrypt.").
			Secret().
			Example("${SP_ENCRYPTION_KEY}"),
		service.NewStringField(FieldFingerprintKey).
			Description("Key for identifier fingerprints: `[<version>:]<64+ hex chars>` (version 1 when omitted). Each workspace fingerprints under its own key derived from it (HKDF), and every fingerprint starts with the version byte. Changing it makes stored fingerprints unmatchable until they are recomputed: docs/operations.md says how to rotate the keys.").
			Secret().
			Example("${SP_FINGERPRINT_KEY}"),
	}
}

// ProtectorFromParsed builds the Protector of a plugin's KeyFields.
func ProtectorFromParsed(conf *service.ParsedConfig) (*Protector, error) {
	enc, err := conf.FieldString(FieldEncryptionKey)
	if err != nil {
		return nil, err
	}
	fp, err := conf.FieldString(FieldFingerprintKey)
	if err != nil {
		return nil, err
	}
	return NewProtector(enc, fp)
}
