package identity

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// Keyring encrypts identifiers with its current key and decrypts with any key
// it holds. Every ciphertext starts with the id of the key that made it
// ("k1:" + base64(nonce ‖ sealed)), so a new key can be made current while
// data written under the old one stays readable: rotate by prepending the new
// key to SP_ENCRYPTION_KEY and keep the old one listed until nothing stored
// still uses it. A Keyring is safe for concurrent use.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// ParseKeyring reads SP_ENCRYPTION_KEY's format: one or more comma-separated
// `<key-id>:<64 hex chars>` entries (AES-256), the first being current. A key
// id is 1 to 16 letters, digits, '-' or '_'.
func ParseKeyring(spec string) (*Keyring, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("encryption key: %w (set SP_ENCRYPTION_KEY to <key-id>:<64 hex chars>)", ErrMissingKey)
	}
	k := &Keyring{aeads: map[string]cipher.AEAD{}}
	for i, entry := range strings.Split(spec, ",") {
		id, hexKey, ok := strings.Cut(strings.TrimSpace(entry), ":")
		if !ok || !validKeyID(id) {
			return nil, fmt.Errorf("encryption key entry %d: %w: want <key-id>:<64 hex chars> with a key id of 1 to 16 letters, digits, '-' or '_'", i+1, ErrInvalidKey)
		}
		if _, dup := k.aeads[id]; dup {
			return nil, fmt.Errorf("encryption key %q: %w: key id listed twice", id, ErrInvalidKey)
		}
		key, err := hex.DecodeString(hexKey)
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("encryption key %q: %w: want 64 hex characters (32 bytes, AES-256)", id, ErrInvalidKey)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("encryption key %q: %w: %v", id, ErrInvalidKey, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("encryption key %q: %w: %v", id, ErrInvalidKey, err)
		}
		k.aeads[id] = aead
		if i == 0 {
			k.current = id
		}
	}
	return k, nil
}

func validKeyID(id string) bool {
	if len(id) == 0 || len(id) > 16 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CurrentKeyID is the id of the key Encrypt uses.
func (k *Keyring) CurrentKeyID() string { return k.current }

// Encrypt seals plaintext with the current key and a random 96-bit nonce. The
// key id is authenticated as additional data, so a ciphertext relabelled with
// another id fails to open rather than decrypting to garbage.
func (k *Keyring) Encrypt(plaintext string) (string, error) {
	aead := k.aeads[k.current]
	buf := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("encrypting identifier with key %q: reading a nonce: %w", k.current, err)
	}
	buf = aead.Seal(buf, buf, []byte(plaintext), []byte(k.current))
	out := make([]byte, 0, len(k.current)+1+base64.StdEncoding.EncodedLen(len(buf)))
	out = append(out, k.current...)
	out = append(out, ':')
	out = base64.StdEncoding.AppendEncode(out, buf)
	return string(out), nil
}

// Decrypt opens a ciphertext made by Encrypt under any key the ring holds.
func (k *Keyring) Decrypt(ciphertext string) (string, error) {
	id, b64, ok := strings.Cut(ciphertext, ":")
	if !ok || !validKeyID(id) {
		return "", fmt.Errorf("%w: no key id prefix", ErrCiphertext)
	}
	aead, ok := k.aeads[id]
	if !ok {
		return "", fmt.Errorf("decrypting identifier: %w %q (is it still listed in SP_ENCRYPTION_KEY?)", ErrUnknownKeyID, id)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", fmt.Errorf("%w: key %q: malformed base64 or too short", ErrCiphertext, id)
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(id))
	if err != nil {
		return "", fmt.Errorf("%w: key %q: authentication failed", ErrCiphertext, id)
	}
	return string(plain), nil
}
