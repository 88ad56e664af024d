package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/speculapro/speculapro/internal/event"
)

// Protected is an identifier in the only forms that may leave the ingest
// API: encrypted, masked and fingerprinted. It never holds the clear value.
type Protected struct {
	Kind   Kind
	Enc    string // key id + ":" + base64 AES-256-GCM ciphertext of the normalised value, bound to workspace and field
	Masked string // display form, see Mask
	FP     string // hex keyed fingerprint of the workspace, see Fingerprinter.Identifier
}

// Protector turns clear identifiers into Protected ones. Safe for concurrent use.
type Protector struct {
	Keys         *Keyring
	Fingerprints *Fingerprinter
}

// NewProtector builds a Protector from the SP_ENCRYPTION_KEY and
// SP_FINGERPRINT_KEY formats; either missing or malformed is an error, so a
// process without keys refuses to start instead of failing every message.
func NewProtector(encryptionKey, fingerprintKey string) (*Protector, error) {
	keys, err := ParseKeyring(encryptionKey)
	if err != nil {
		return nil, err
	}
	fps, err := NewFingerprinter(fingerprintKey)
	if err != nil {
		return nil, err
	}
	return &Protector{Keys: keys, Fingerprints: fps}, nil
}

// Protect normalises raw as an identifier of kind, held in field (such as
// FieldAccountNumber) of workspace ws, and returns its encrypted, masked and
// fingerprinted forms.
func (p *Protector) Protect(ws event.UUID, field string, kind Kind, raw string) (Protected, error) {
	norm, err := Normalize(kind, raw)
	if err != nil {
		return Protected{}, err
	}
	return p.ProtectNormalized(ws, field, kind, norm, nil)
}

// ReadClear reads a clear identifier as it arrives, the one reading the
// ingest API and the counterparty_fingerprint processor share: kind as
// given ("" infers it from raw, InferKind), raw normalised as that kind,
// ready for ProtectNormalized.
func ReadClear(kind Kind, raw string) (Kind, string, error) {
	if kind == "" {
		kind = InferKind(raw)
	}
	norm, err := Normalize(kind, raw)
	return kind, norm, err
}

// DevKeys returns fixed, publicly known keys in the SP_ENCRYPTION_KEY and
// SP_FINGERPRINT_KEY formats, for `speculapro dev` and tests ONLY. They are
// derived from constant strings in this source file, so they protect nothing:
// never use them where real identifiers are stored. They are fixed rather
// than random so that data a dev stack wrote stays decryptable and its
// fingerprints stay matchable across restarts.
func DevKeys() (encryptionKey, fingerprintKey string) {
	enc := sha256.Sum256([]byte("speculapro dev-only encryption key; not secret"))
	fp := sha256.Sum256([]byte("speculapro dev-only fingerprint key; not secret"))
	return "dev:" + hex.EncodeToString(enc[:]), hex.EncodeToString(fp[:])
}

// String keeps a Protector's keys out of logs and error messages.
func (p *Protector) String() string {
	return fmt.Sprintf("identity.Protector{current key %q}", p.Keys.CurrentKeyID())
}
