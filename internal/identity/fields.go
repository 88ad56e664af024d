package identity

import (
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/config"
)

// Field names of the keys, shared by every plugin that protects identifiers.
const (
	FieldEncryptionKey  = "encryption_key"
	FieldFingerprintKey = "fingerprint_key"
)

// KeyFields are the two key fields every plugin that protects identifiers
// embeds in its spec. Empty means the SP_* variable: the engine does not
// interpolate ${…} in a default, and a key must never be printed as one.
func KeyFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringField(FieldEncryptionKey).
			Description("Key ring for identifier encryption: comma-separated `<key-id>:<64 hex chars>` entries, the first is current (encrypts), all decrypt. Empty means the `SP_ENCRYPTION_KEY` environment variable. Missing keys stop the pipeline at start.").
			Secret().
			Default("").
			Example("${SP_ENCRYPTION_KEY}"),
		service.NewStringField(FieldFingerprintKey).
			Description("HMAC-SHA256 key for fingerprints, at least 64 hex characters. Empty means the `SP_FINGERPRINT_KEY` environment variable. Never change it once data is stored: every stored fingerprint would stop matching.").
			Secret().
			Default("").
			Example("${SP_FINGERPRINT_KEY}"),
	}
}

// ProtectorFromParsed builds the Protector of a plugin's KeyFields, falling
// back to SP_ENCRYPTION_KEY and SP_FINGERPRINT_KEY for an empty field.
func ProtectorFromParsed(conf *service.ParsedConfig) (*Protector, error) {
	keys := [2]string{}
	for i, f := range [2]struct {
		field   string
		setting config.Setting
	}{{FieldEncryptionKey, config.EncryptionKey}, {FieldFingerprintKey, config.FingerprintKey}} {
		v, err := conf.FieldString(f.field)
		if err != nil {
			return nil, err
		}
		if v == "" {
			v = f.setting.Value()
		}
		keys[i] = v
	}
	return NewProtector(keys[0], keys[1])
}
