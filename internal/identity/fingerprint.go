package identity

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/speculapro/speculapro/internal/event"
)

// fpDomain is HKDF's info prefix for a workspace's fingerprint key.
const fpDomain = "speculapro fingerprint key v"

// Fingerprinter derives keyed fingerprints. Keyed (HMAC-SHA256) rather than
// a plain hash because identifiers have so little entropy that anyone could
// hash every phone number of a country and reverse an unkeyed fingerprint.
//
// Each workspace fingerprints under its own key, derived with HKDF-SHA256
// from SP_FINGERPRINT_KEY and the workspace ID, so the same IBAN in two
// workspaces gets unrelated fingerprints and no stored value links tenants.
// Matching (a counterparty to a monitored account, counterparties to each
// other, running totals by counterparty) only ever happens within a
// workspace, so nothing is lost.
//
// Every fingerprint starts with the key's version, one byte (two hex
// digits, "01" for version 1), so fingerprints made under another key can
// never compare equal to them by accident and a query can find the rows
// still carrying an old version (get_byte(number_fingerprint, 0)).
// docs/operations.md gives the rotation procedure. A Fingerprinter is
// safe for concurrent use.
type Fingerprinter struct {
	version byte
	master  []byte
	pools   sync.Map // event.UUID → *sync.Pool of hash.Hash (HMAC under the workspace's key)
}

// NewFingerprinter reads SP_FINGERPRINT_KEY's format: at least 64 hex
// characters (32 bytes), optionally preceded by the key's version and a
// colon ("2:<hex>"); without one the version is 1.
func NewFingerprinter(spec string) (*Fingerprinter, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("fingerprint key: %w (set SP_FINGERPRINT_KEY to 64 hex chars)", ErrMissingKey)
	}
	version := 1
	if v, hexKey, ok := strings.Cut(spec, ":"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 255 {
			return nil, fmt.Errorf("fingerprint key: %w: the version before ':' must be 1 to 255", ErrInvalidKey)
		}
		version, spec = n, hexKey
	}
	key, err := hex.DecodeString(spec)
	if err != nil || len(key) < 32 {
		return nil, fmt.Errorf("fingerprint key: %w: want at least 64 hex characters (32 bytes)", ErrInvalidKey)
	}
	return &Fingerprinter{version: byte(version), master: key}, nil
}

// Version is the key version every fingerprint starts with.
func (f *Fingerprinter) Version() byte { return f.version }

// macState is a pooled HMAC under a workspace's key with the scratch its
// input and output are built in (a hash.Hash is an interface, so what is
// written to it would otherwise escape to the heap, one allocation a part).
type macState struct {
	h   hash.Hash
	buf []byte
}

// pool returns the HMAC pool of ws's key, deriving the key on first use
// (hmac.New costs two key schedules, so HMACs are reused).
func (f *Fingerprinter) pool(ws event.UUID) *sync.Pool {
	if p, ok := f.pools.Load(ws); ok {
		return p.(*sync.Pool)
	}
	info := make([]byte, 0, len(fpDomain)+3+16)
	info = append(append(strconv.AppendInt(append(info, fpDomain...), int64(f.version), 10), ' '), ws[:]...)
	key, err := hkdf.Key(sha256.New, f.master, nil, string(info), 32)
	if err != nil {
		// Only an output longer than 255 hash blocks fails.
		panic(fmt.Sprintf("identity: deriving a fingerprint key: %v", err))
	}
	p := &sync.Pool{New: func() any { return &macState{h: hmac.New(sha256.New, key), buf: make([]byte, 0, 256)} }}
	actual, _ := f.pools.LoadOrStore(ws, p)
	return actual.(*sync.Pool)
}

// sum is hex(version ‖ HMAC(key_ws, a ‖ b ‖ c)).
func (f *Fingerprinter) sum(ws event.UUID, a, b, c string) string {
	pool := f.pool(ws)
	m := pool.Get().(*macState)
	m.h.Reset()
	m.buf = append(append(append(m.buf[:0], a...), b...), c...)
	m.h.Write(m.buf)
	m.buf = append(m.buf[:0], f.version)
	m.buf = m.h.Sum(m.buf)
	out := hex.AppendEncode(m.buf[len(m.buf):], m.buf)
	fp := string(out)
	m.buf = m.buf[:0]
	pool.Put(m)
	return fp
}

// Identifier is the keyed fingerprint of a normalised identifier in
// workspace ws: hex(version ‖ HMAC-SHA256(key_ws, kind + ":" + normalized)).
// A monitored account's number and a counterparty's identifier of the same
// kind and value in the same workspace get the same fingerprint, which is
// how a payment is linked to one of our own customers without decrypting
// anything.
//
// The kind is part of the input on purpose. An IBAN embeds the domestic
// account number, but where it sits in the BBAN differs by country, so an
// IBAN cannot be reduced to "the" account number reliably; and a bare number
// like 12345678 exists at thousands of banks, so matching it against every
// IBAN ending in those digits would link strangers. So an account known by
// its IBAN matches counterparties paid by IBAN, one known by a domestic
// number matches payments to that number, and a customer system that has
// both should send the IBAN.
func (f *Fingerprinter) Identifier(ws event.UUID, kind Kind, normalized string) string {
	return f.sum(ws, string(kind), ":", normalized)
}

// Counterparty is the de-duplication fingerprint of a counterparty within
// workspace ws, the natural key the persister upserts counterparties on:
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
func (f *Fingerprinter) Counterparty(ws event.UUID, identifierFP, name string) string {
	if identifierFP != "" {
		return f.sum(ws, "cp:id:", identifierFP, "")
	}
	if n := NormalizeName(name); n != "" {
		return f.sum(ws, "cp:name:", n, "")
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
