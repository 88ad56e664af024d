package identity

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error this package returns wraps one of them and says
// which kind or key failed and why; none carries an identifier's value or a
// key's bytes, so callers may log them and return them to API clients.
var (
	// ErrInvalidIdentifier: the value is not a valid identifier of its kind
	// (bad IBAN checksum, stray characters, wrong length).
	ErrInvalidIdentifier = errors.New("invalid identifier")
	// ErrUnknownKind: the identifier kind is not iban, account_number or phone.
	ErrUnknownKind = errors.New("unknown identifier kind")
	// ErrMissingKey: SP_ENCRYPTION_KEY or SP_FINGERPRINT_KEY is not set.
	ErrMissingKey = errors.New("missing key")
	// ErrInvalidKey: a key setting is malformed (format, length, hex).
	ErrInvalidKey = errors.New("invalid key")
	// ErrUnknownKeyID: a ciphertext names a key id the key ring does not hold.
	ErrUnknownKeyID = errors.New("unknown encryption key id")
	// ErrCiphertext: a ciphertext is malformed or fails authentication.
	ErrCiphertext = errors.New("cannot decrypt identifier")
)

// Kind is what an identifier is. Fingerprints are computed within a kind, so
// a monitored account and a counterparty match only when both name the same
// kind (see Fingerprinter.Identifier).
type Kind string

// The identifier kinds, as they appear in events (`identifier_kind`).
const (
	KindIBAN          Kind = "iban"
	KindAccountNumber Kind = "account_number"
	KindPhone         Kind = "phone"
)

// ParseKind accepts a kind as sent by a client, case-insensitively.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(strings.ToLower(strings.TrimSpace(s))); k {
	case KindIBAN, KindAccountNumber, KindPhone:
		return k, nil
	}
	// The kind is a label, not an identifier, so naming it is safe; cap it so
	// a client cannot make us echo an arbitrary blob.
	if len(s) > 32 {
		s = s[:32] + "…"
	}
	return "", fmt.Errorf("%w %q (want iban, account_number or phone)", ErrUnknownKind, s)
}

// InferKind guesses the kind of an identifier sent without one: a value that
// passes the IBAN checks is an IBAN, one starting with "+" is a phone number,
// anything else an account number. A client that knows the kind should say
// so: a national phone number without "+" is taken for an account number.
func InferKind(raw string) Kind {
	if _, err := normalizeIBAN(raw); err == nil {
		return KindIBAN
	}
	if strings.HasPrefix(strings.TrimSpace(raw), "+") {
		return KindPhone
	}
	return KindAccountNumber
}

// Normalize returns the canonical form of an identifier, the form that is
// encrypted and fingerprinted, so that "de89 3704 0044 0532 0130 00" and
// "DE89370400440532013000" are the same IBAN:
//   - iban: spaces and dashes removed, upper case, 15 to 34 letters and digits
//     starting with a country code and two check digits, mod-97 checksum valid.
//     Country-specific lengths are not checked, so a new IBAN country needs no
//     release; the checksum catches typos.
//   - account_number: letters and digits only, upper case; spaces, dashes, dots,
//     slashes and underscores are separators and dropped; 1 to 34 characters.
//   - phone: E.164 style, "+" then 7 to 15 digits; spaces, dashes, dots and
//     parentheses dropped, a leading "00" read as "+". A number without an
//     international prefix is refused: its country is unknown, and a guessed
//     one would fingerprint differently from the same number sent in full.
func Normalize(kind Kind, raw string) (string, error) {
	switch kind {
	case KindIBAN:
		return normalizeIBAN(raw)
	case KindAccountNumber:
		return normalizeAccountNumber(raw)
	case KindPhone:
		return normalizePhone(raw)
	}
	return "", fmt.Errorf("%w %q", ErrUnknownKind, string(kind))
}

func invalid(kind Kind, reason string) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidIdentifier, kind, reason)
}

func normalizeIBAN(raw string) (string, error) {
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == ' ' || c == '-' || c == '\t':
			continue
		case c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			return "", invalid(KindIBAN, "contains a character other than letters, digits, spaces and dashes")
		}
		b = append(b, c)
	}
	if len(b) < 15 || len(b) > 34 {
		return "", invalid(KindIBAN, fmt.Sprintf("has %d characters, want 15 to 34", len(b)))
	}
	if !isLetter(b[0]) || !isLetter(b[1]) {
		return "", invalid(KindIBAN, "does not start with a country code")
	}
	if !isDigit(b[2]) || !isDigit(b[3]) {
		return "", invalid(KindIBAN, "has no check digits after the country code")
	}
	// ISO 13616: move the first four characters to the end, read letters as
	// 10..35, and the number mod 97 must be 1. Done digit by digit so no big
	// integer is needed.
	rem := 0
	for i := range b {
		c := b[(i+4)%len(b)]
		if isDigit(c) {
			rem = (rem*10 + int(c-'0')) % 97
		} else {
			rem = (rem*100 + int(c-'A') + 10) % 97
		}
	}
	if rem != 1 {
		return "", invalid(KindIBAN, "checksum does not match (mod 97)")
	}
	return string(b), nil
}

func normalizeAccountNumber(raw string) (string, error) {
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == ' ' || c == '-' || c == '.' || c == '/' || c == '_' || c == '\t':
			continue
		case c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			return "", invalid(KindAccountNumber, "contains a character other than letters, digits and separators")
		}
		b = append(b, c)
	}
	if len(b) == 0 || len(b) > 34 {
		return "", invalid(KindAccountNumber, fmt.Sprintf("has %d letters and digits, want 1 to 34", len(b)))
	}
	return string(b), nil
}

func normalizePhone(raw string) (string, error) {
	b := make([]byte, 0, len(raw)+1)
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == ' ' || c == '-' || c == '.' || c == '(' || c == ')' || c == '\t':
			continue
		case c == '+' && len(b) == 0:
		case isDigit(c):
		default:
			return "", invalid(KindPhone, "contains a character other than digits, a leading +, spaces, dashes, dots and parentheses")
		}
		b = append(b, c)
	}
	switch {
	case len(b) > 0 && b[0] == '+':
	case len(b) > 2 && b[0] == '0' && b[1] == '0':
		b = append(b[:0], append([]byte{'+'}, b[2:]...)...)
	default:
		return "", invalid(KindPhone, "has no international prefix (+ or 00)")
	}
	if n := len(b) - 1; n < 7 || n > 15 {
		return "", invalid(KindPhone, fmt.Sprintf("has %d digits, want 7 to 15", n))
	}
	if b[1] == '0' {
		return "", invalid(KindPhone, "has a country code starting with 0")
	}
	return string(b), nil
}

// Mask returns the display form of a normalised identifier. It reveals only
// what an analyst needs to tell identifiers apart at a glance:
//   - iban: country and check digits and the last 4, with a fixed-width middle
//     so the length is not revealed either: "DE89 **** **** **** 3000".
//   - account_number: the last 4 ("****6789"); of a short number at most half.
//   - phone: "+", the first two digits (the country code or most of it) and
//     the last 3: "+49 ******* 678".
func Mask(kind Kind, normalized string) string {
	switch kind {
	case KindIBAN:
		if len(normalized) < 8 {
			return "**** **** **** ****"
		}
		return normalized[:4] + " **** **** **** " + normalized[len(normalized)-4:]
	case KindPhone:
		if len(normalized) < 8 {
			return "+** ******* ***"
		}
		return normalized[:3] + " ******* " + normalized[len(normalized)-3:]
	default:
		keep := min(4, len(normalized)/2)
		return "****" + normalized[len(normalized)-keep:]
	}
}

func isLetter(c byte) bool { return c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
