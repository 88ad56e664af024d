package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
	"sync"
	"unicode"
)

// Fingerprinter derives keyed fingerprints. Keyed (HMAC-SHA256 under
// SP_FINGERPRINT_KEY) rather than a plain hash because identifiers have so
// little entropy that anyone could hash every phone number of a country and
// reverse an unkeyed fingerprint. The key must never change once data is
// stored: a new key makes every stored fingerprint unmatchable. A
// Fingerprinter is safe for concurrent use.
type Fingerprinter struct {
	pool sync.Pool // of hash.Hash (HMAC), because hmac.New costs two key schedules
}

// NewFingerprinter reads SP_FINGERPRINT_KEY's format: at least 64 hex
// characters (32 bytes, the HMAC-SHA256 block's useful size).
func NewFingerprinter(hexKey string) (*Fingerprinter, error) {
	hexKey = strings.TrimSpace(hexKey)
	if hexKey == "" {
		return nil, fmt.Errorf("fingerprint key: %w (set SP_FINGERPRINT_KEY to 64 hex chars)", ErrMissingKey)
	}
	key, err := hex.DecodeString(hexKey)
	if err != nil || len(key) < 32 {
		return nil, fmt.Errorf("fingerprint key: %w: want at least 64 hex characters (32 bytes)", ErrInvalidKey)
	}
	f := &Fingerprinter{}
	f.pool.New = func() any { return hmac.New(sha256.New, key) }
	return f, nil
}

func (f *Fingerprinter) sum(parts ...string) string {
	h := f.pool.Get().(hash.Hash)
	h.Reset()
	for _, p := range parts {
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	out := hex.EncodeToString(h.Sum(sum[:0]))
	f.pool.Put(h)
	return out
}

// Identifier is the keyed fingerprint of a normalised identifier:
// hex(HMAC-SHA256(key, kind + ":" + normalized)). A monitored account's
// number and a counterparty's identifier of the same kind and value get the
// same fingerprint, which is how a payment is linked to one of our own
// customers without decrypting anything.
//
// The kind is part of the input on purpose. An IBAN embeds the domestic
// account number, but where it sits in the BBAN differs by country, so an
// IBAN cannot be reduced to "the" account number reliably; and a bare number
// like 12345678 exists at thousands of banks, so matching it against every
// IBAN ending in those digits would link strangers. So an account known by
// its IBAN matches counterparties paid by IBAN, one known by a domestic
// number matches payments to that number, and a customer system that has
// both should send the IBAN.
func (f *Fingerprinter) Identifier(kind Kind, normalized string) string {
	return f.sum(string(kind), ":", normalized)
}

// Counterparty is the de-duplication fingerprint of a counterparty within a
// workspace, the natural key the persister upserts counterparties on:
//   - with an identifier: derived from its identifier fingerprint only
//     ("cp:id:" + identifierFP), so one IBAN is one counterparty whatever
//     name each payment spelled;
//   - without one: derived from the name, lower-cased with punctuation
//     dropped and spaces collapsed ("cp:name:" + name), so "ACME Ltd." and
//     "acme  ltd" are one counterparty. Names are all we have for card
//     merchants and cash, and there merging by name is what analysts want.
//
// It returns "" when there is neither an identifier nor a name with a letter
// or digit in it: such a counterparty cannot be de-duplicated and is not
// recorded. The prefixes keep the two derivations from ever colliding.
func (f *Fingerprinter) Counterparty(identifierFP, name string) string {
	if identifierFP != "" {
		return f.sum("cp:id:", identifierFP)
	}
	if n := NormalizeName(name); n != "" {
		return f.sum("cp:name:", n)
	}
	return ""
}

// NormalizeName is the form of a counterparty name used for its
// de-duplication fingerprint: lower case, letters and digits kept (any
// script), every run of other characters turned into one space, trimmed.
func NormalizeName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	space := false
	for _, r := range name {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		// Apostrophes and dots join rather than split: "O'Neil" and "O.K." stay one word.
		if r == '\'' || r == '’' || r == '.' {
			continue
		}
		space = true
	}
	return b.String()
}
