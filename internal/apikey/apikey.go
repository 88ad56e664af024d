package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors; none carries any part of the key that was presented.
var (
	// ErrMalformed: the presented string is not a SpeculaPro API key at all.
	ErrMalformed = errors.New("malformed API key")
)

const (
	// Prefix starts every key, so a leaked key is recognisable by secret
	// scanners and a key pasted into the wrong place is easy to spot.
	Prefix = "spk_"
	// secretBytes is the key's entropy; 256 bits makes guessing hopeless, so
	// a fast unsalted hash is enough to store it (unlike a password).
	secretBytes = 32
	// displayChars is how much of the secret's hex the display prefix keeps:
	// enough to tell keys apart, far too little to help guess one.
	displayChars = 8
)

// Key is a newly generated API key.
type Key struct {
	// Secret is the full key, e.g. spk_3f9c…; shown to its owner once.
	Secret string
	// Hash is SHA-256 of the key's 32 random bytes, the stored form.
	Hash []byte
	// Display is the non-secret beginning of the key, e.g. spk_3f9c0a1b.
	Display string
}

// New generates a key from 32 bytes of crypto/rand.
func New() (Key, error) {
	raw := make([]byte, secretBytes)
	if _, err := rand.Read(raw); err != nil {
		return Key{}, fmt.Errorf("generating an API key: %w", err)
	}
	secret := Prefix + hex.EncodeToString(raw)
	sum := sha256.Sum256(raw)
	return Key{Secret: secret, Hash: sum[:], Display: secret[:len(Prefix)+displayChars]}, nil
}

// Hash returns the stored form of a presented key, or ErrMalformed when it
// cannot be a key (wrong prefix, length or alphabet), so obvious garbage
// never reaches the database.
func Hash(presented string) ([]byte, error) {
	hexPart, ok := strings.CutPrefix(presented, Prefix)
	if !ok || len(hexPart) != 2*secretBytes {
		return nil, ErrMalformed
	}
	raw, err := hex.DecodeString(hexPart)
	if err != nil {
		return nil, ErrMalformed
	}
	sum := sha256.Sum256(raw)
	return sum[:], nil
}
