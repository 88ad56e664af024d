package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// secretPrefix marks a signing secret, so one pasted in the wrong place is
// recognisable; the Standard Webhooks libraries strip it.
const secretPrefix = "whsec_"

// secretBytes is the size of a new secret's key: 256 random bits, within
// the 24 to 64 bytes receivers' libraries expect.
const secretBytes = 32

// NewSecret is a fresh signing secret: "whsec_" and the standard, padded
// base64 of 32 random bytes, the form the Standard Webhooks libraries take
// as is (SigningKey). Secrets of the earlier form, "whsec_" and 64 hex
// characters, stay valid: hex digits are base64 too.
func NewSecret() (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a webhook secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b), nil
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
