package webhook

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// secretPrefix marks a signing secret, so one pasted in the wrong place is
// recognisable.
const secretPrefix = "whsec_"

// NewSecret is a fresh signing secret: "whsec_" and 64 hex characters (256
// random bits). Receivers use the whole string, prefix included, as the HMAC
// key.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a webhook secret: %w", err)
	}
	return secretPrefix + hex.EncodeToString(b), nil
}

// FieldSecret is the field a signing secret is encrypted for: the
// ciphertext is bound to it and to the endpoint's workspace, so it opens
// nowhere else.
const FieldSecret = "webhook_endpoint.secret"

// SealSecret encrypts a signing secret of an endpoint of workspace ws for
// webhook_endpoints.secret_encrypted with the identity key ring
// (SP_ENCRYPTION_KEY), like every stored secret.
func SealSecret(keys *identity.Keyring, ws event.UUID, secret string) ([]byte, error) {
	enc, err := keys.Encrypt(ws, FieldSecret, secret)
	if err != nil {
		return nil, fmt.Errorf("encrypting the webhook secret: %w", err)
	}
	return []byte(enc), nil
}

// OpenSecret decrypts what SealSecret stored.
func OpenSecret(keys *identity.Keyring, ws event.UUID, sealed []byte) (string, error) {
	s, err := keys.Decrypt(ws, FieldSecret, string(sealed))
	if err != nil {
		return "", fmt.Errorf("decrypting the webhook secret: %w", err)
	}
	return s, nil
}
