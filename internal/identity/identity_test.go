package identity

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/internal/event"
)

var (
	wsA = event.UUID{0xa1, 1}
	wsB = event.UUID{0xb2, 2}
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		kind    Kind
		raw     string
		want    string
		wantErr string // substring of the error; "" means success
	}{
		{KindIBAN, "DE89370400440532013000", "DE89370400440532013000", ""},
		{KindIBAN, "de89 3704 0044 0532 0130 00", "DE89370400440532013000", ""},
		{KindIBAN, "GB82-WEST-1234-5698-7654-32", "GB82WEST12345698765432", ""},
		{KindIBAN, "FR14 2004 1010 0505 0001 3M02 606", "FR1420041010050500013M02606", ""},
		{KindIBAN, "BE68539007547034", "BE68539007547034", ""},
		{KindIBAN, "DE89370400440532013001", "", "checksum"},
		{KindIBAN, "DE88370400440532013000", "", "checksum"},
		{KindIBAN, "DE8937040044", "", "want 15 to 34"},
		{KindIBAN, "1289370400440532013000", "", "country code"},
		{KindIBAN, "DEXX370400440532013000", "", "check digits"},
		{KindIBAN, "DE89/3704/0044/0532/0130/00", "", "character"},
		{KindAccountNumber, "0532-0130.00", "0532013000", ""},
		{KindAccountNumber, " 12 34 56 78 ", "12345678", ""},
		{KindAccountNumber, "ab/12_cd", "AB12CD", ""},
		{KindAccountNumber, "--", "", "want 1 to 34"},
		{KindAccountNumber, "1234#5678", "", "character"},
		{KindPhone, "+49 (171) 123-4567", "+491711234567", ""},
		{KindPhone, "0049 171 1234567", "+491711234567", ""},
		{KindPhone, "+1.415.555.0100", "+14155550100", ""},
		{KindPhone, "0171 1234567", "", "international prefix"},
		{KindPhone, "+49 171 1234 5678 9012", "", "want 7 to 15"},
		{KindPhone, "+12345", "", "want 7 to 15"},
		{KindPhone, "+49 171 CALL-ME", "", "character"},
		{KindPhone, "+0171234567", "", "starting with 0"},
		{KindPhone, "+49+1711234567", "", "character"},
		{Kind("email"), "x@example.com", "", "unknown identifier kind"},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind)+"/"+tt.raw, func(t *testing.T) {
			got, err := Normalize(tt.kind, tt.raw)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("Normalize = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Normalize error = %v; want one containing %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidIdentifier) && !errors.Is(err, ErrUnknownKind) {
				t.Errorf("error %v wraps neither ErrInvalidIdentifier nor ErrUnknownKind", err)
			}
			// The error must be safe to log: no run of 4+ digits from the value.
			if digits := onlyDigits(tt.raw); len(digits) >= 4 && strings.Contains(onlyDigits(err.Error()), digits[len(digits)-4:]) && tt.kind != "email" {
				t.Errorf("error %q leaks part of the identifier", err)
			}
		})
	}
}

func onlyDigits(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestMask(t *testing.T) {
	tests := []struct {
		kind Kind
		norm string
		want string
	}{
		{KindIBAN, "DE89370400440532013000", "DE89 **** **** **** 3000"},
		{KindIBAN, "BE68539007547034", "BE68 **** **** **** 7034"},
		{KindAccountNumber, "0532013000", "****3000"},
		{KindAccountNumber, "123456", "****456"},
		{KindAccountNumber, "1", "****"},
		{KindPhone, "+491711234567", "+49 ******* 567"},
		{KindPhone, "+14155550100", "+14 ******* 100"},
	}
	for _, tt := range tests {
		if got := Mask(tt.kind, tt.norm); got != tt.want {
			t.Errorf("Mask(%s, %s) = %q, want %q", tt.kind, tt.norm, got, tt.want)
		}
	}
}

func TestParseKindAndInferKind(t *testing.T) {
	for in, want := range map[string]Kind{"IBAN": KindIBAN, " phone ": KindPhone, "account_number": KindAccountNumber} {
		if got, err := ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseKind("card_pan"); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("ParseKind(card_pan) error = %v, want ErrUnknownKind", err)
	}
	for in, want := range map[string]Kind{
		"DE89 3704 0044 0532 0130 00": KindIBAN,
		"DE89 3704 0044 0532 0130 01": KindAccountNumber, // bad checksum: not an IBAN
		"+49 171 1234567":             KindPhone,
		"12345678":                    KindAccountNumber,
	} {
		if got := InferKind(in); got != want {
			t.Errorf("InferKind(%q) = %q, want %q", in, got, want)
		}
	}
}

const (
	testKeyA = "k1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	testKeyB = "k2:1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100"
	testFP   = "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
)

func TestKeyringRoundTripAndRotation(t *testing.T) {
	old, err := ParseKeyring(testKeyA)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := old.Encrypt(wsA, FieldAccountNumber, "DE89370400440532013000")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c1, "k1:") || strings.Contains(c1, "DE89") {
		t.Fatalf("ciphertext %q: want k1: prefix and no clear value", c1)
	}
	c1again, _ := old.Encrypt(wsA, FieldAccountNumber, "DE89370400440532013000")
	if c1again == c1 {
		t.Error("two encryptions of one value are equal: nonce is not random")
	}

	// Rotate: k2 becomes current, k1 stays listed for what it wrote.
	rotated, err := ParseKeyring(testKeyB + ", " + testKeyA)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rotated.Decrypt(wsA, FieldAccountNumber, c1); err != nil || got != "DE89370400440532013000" {
		t.Fatalf("old ciphertext after rotation: %q, %v", got, err)
	}
	c2, _ := rotated.Encrypt(wsA, FieldAccountNumber, "+491711234567")
	if !strings.HasPrefix(c2, "k2:") {
		t.Fatalf("rotated ring encrypts with %q, want current key k2", c2[:3])
	}
	if _, err := old.Decrypt(wsA, FieldAccountNumber, c2); !errors.Is(err, ErrUnknownKeyID) {
		t.Errorf("ring without k2 decrypting a k2 ciphertext: %v, want ErrUnknownKeyID", err)
	}
	// Relabelling a ciphertext with another key id must not open.
	if _, err := rotated.Decrypt(wsA, FieldAccountNumber, "k1:"+strings.TrimPrefix(c2, "k2:")); !errors.Is(err, ErrCiphertext) {
		t.Errorf("relabelled ciphertext: %v, want ErrCiphertext", err)
	}
	tampered := []byte(c1)
	tampered[len(tampered)-3] ^= 0x01
	if _, err := rotated.Decrypt(wsA, FieldAccountNumber, string(tampered)); !errors.Is(err, ErrCiphertext) {
		t.Errorf("tampered ciphertext: %v, want ErrCiphertext", err)
	}
	for _, bad := range []string{"", "nokeyid", "k1:@@@", "k1:AAAA"} {
		if _, err := rotated.Decrypt(wsA, FieldAccountNumber, bad); err == nil {
			t.Errorf("Decrypt(%q) succeeded", bad)
		}
	}
}

func TestParseKeyringErrors(t *testing.T) {
	tests := map[string]error{
		"": ErrMissingKey,
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f": ErrInvalidKey, // no key id
		"k1:0001":                         ErrInvalidKey,
		"k1:zz" + strings.Repeat("0", 62): ErrInvalidKey,
		testKeyA + "," + testKeyA:         ErrInvalidKey,
		"bad id:" + testKeyA[3:]:          ErrInvalidKey,
	}
	for spec, want := range tests {
		_, err := ParseKeyring(spec)
		if !errors.Is(err, want) {
			t.Errorf("ParseKeyring(%.20q…) = %v, want %v", spec, err, want)
		}
		if len(spec) > 10 && err != nil && strings.Contains(err.Error(), "0102030405") {
			t.Errorf("error leaks key material: %v", err)
		}
	}
	if _, err := NewFingerprinter(""); !errors.Is(err, ErrMissingKey) {
		t.Errorf("NewFingerprinter(\"\") = %v, want ErrMissingKey", err)
	}
	if _, err := NewFingerprinter("abcd"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("NewFingerprinter(short) = %v, want ErrInvalidKey", err)
	}
	if _, err := NewProtector(testKeyA, ""); !errors.Is(err, ErrMissingKey) {
		t.Errorf("NewProtector without fingerprint key = %v, want ErrMissingKey", err)
	}
}

func TestFingerprints(t *testing.T) {
	p, err := NewProtector(testKeyA, testFP)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Protect(wsA, FieldCounterpartyIdentifier, KindIBAN, "DE89 3704 0044 0532 0130 00")
	b, _ := p.Protect(wsA, FieldCounterpartyIdentifier, KindIBAN, "de89370400440532013000")
	if a.FP != b.FP || len(a.FP) != 66 {
		t.Fatalf("same IBAN, two spellings: fingerprints %q and %q", a.FP, b.FP)
	}
	if a.Masked != "DE89 **** **** **** 3000" || a.Kind != KindIBAN {
		t.Errorf("Protect = %+v", a)
	}
	// Same characters, different kind: deliberately different fingerprints.
	acct, _ := p.Protect(wsA, FieldCounterpartyIdentifier, KindAccountNumber, "DE89370400440532013000")
	if acct.FP == a.FP {
		t.Error("account_number and iban of the same characters share a fingerprint")
	}
	// Another fingerprint key gives another fingerprint: it is keyed.
	other, _ := NewProtector(testKeyA, strings.Repeat("11", 32))
	c, _ := other.Protect(wsA, FieldCounterpartyIdentifier, KindIBAN, "DE89370400440532013000")
	if c.FP == a.FP {
		t.Error("fingerprint does not depend on the key")
	}
	// Rotating the encryption key must not change fingerprints.
	rot, _ := NewProtector(testKeyB+","+testKeyA, testFP)
	d, _ := rot.Protect(wsA, FieldCounterpartyIdentifier, KindIBAN, "DE89370400440532013000")
	if d.FP != a.FP {
		t.Error("fingerprint changed with the encryption key")
	}
	if got, err := rot.Keys.Decrypt(wsA, FieldCounterpartyIdentifier, a.Enc); err != nil || got != "DE89370400440532013000" {
		t.Errorf("Decrypt(Enc) = %q, %v; want the normalised IBAN", got, err)
	}

	f := p.Fingerprints
	if f.Counterparty(wsA, a.FP, "Alice") != f.Counterparty(wsA, a.FP, "Bob") {
		t.Error("counterparty with an identifier: fingerprint depends on the name")
	}
	if f.Counterparty(wsA, "", "ACME Ltd.") != f.Counterparty(wsA, "", "  acme   LTD ") {
		t.Error("name-only counterparty: spelling variants differ")
	}
	if f.Counterparty(wsA, "", "ACME Ltd") == f.Counterparty(wsA, "", "ACME Limited") {
		t.Error("different names share a fingerprint")
	}
	if f.Counterparty(wsA, "", "acme") == f.Counterparty(wsA, f.sum(wsA, "acme", "", ""), "") {
		t.Error("name and identifier derivations collide")
	}
	if got := f.Counterparty(wsA, "", " -- "); got != "" {
		t.Errorf("counterparty with neither identifier nor name: %q, want \"\"", got)
	}
}

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{
		"ACME Ltd.":        "acme ltd",
		"  O'Neil,  Mary ": "oneil mary",
		"Müller & Söhne":   "müller söhne",
		"株式会社 トヨタ":         "株式会社 トヨタ",
		"---":              "",
	} {
		if got := NormalizeName(in); got != want {
			t.Errorf("NormalizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDevKeys(t *testing.T) {
	enc, fp := DevKeys()
	p, err := NewProtector(enc, fp)
	if err != nil {
		t.Fatalf("DevKeys do not parse: %v", err)
	}
	if p.Keys.CurrentKeyID() != "dev" {
		t.Errorf("dev key id = %q, want dev", p.Keys.CurrentKeyID())
	}
	enc2, fp2 := DevKeys()
	if enc != enc2 || fp != fp2 {
		t.Error("DevKeys are not stable across calls")
	}
	if strings.Contains(p.String(), enc[4:]) {
		t.Error("Protector.String leaks the key")
	}
}

// BenchmarkSeal is one identifier of a request's batch sealed by the
// request's Sealer (BenchmarkProtect pays a Sealer per identifier).
func BenchmarkSeal(b *testing.B) {
	ring, _ := ParseKeyring(testKeyA)
	s, err := ring.NewSealer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Seal(wsA, FieldCounterpartyIdentifier, "DE89370400440532013000"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProtect(b *testing.B) {
	p, err := NewProtector(testKeyA, testFP)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Protect(wsA, FieldCounterpartyIdentifier, KindIBAN, "DE89 3704 0044 0532 0130 00"); err != nil {
			b.Fatal(err)
		}
	}
}

// A ciphertext opens only for the workspace and field it was made for:
// copied into another workspace's row or another field, it fails.
func TestCiphertextBoundToWorkspaceAndField(t *testing.T) {
	ring, err := ParseKeyring(testKeyA)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ring.Encrypt(wsA, FieldAccountNumber, "DE89370400440532013000")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ring.Decrypt(wsA, FieldAccountNumber, c); err != nil || got != "DE89370400440532013000" {
		t.Fatalf("Decrypt in place = %q, %v", got, err)
	}
	if _, err := ring.Decrypt(wsB, FieldAccountNumber, c); !errors.Is(err, ErrCiphertext) {
		t.Errorf("ciphertext copied to another workspace: %v, want ErrCiphertext", err)
	}
	if _, err := ring.Decrypt(wsA, FieldCounterpartyIdentifier, c); !errors.Is(err, ErrCiphertext) {
		t.Errorf("ciphertext copied to another field: %v, want ErrCiphertext", err)
	}
}

// No GCM key meets random nonces or a nonce twice: every Sealer
// (and every single Encrypt) takes its own salt, and a Sealer's messages
// count up under it; the raw format is the format byte, the 24-byte salt
// and the 4-byte counter.
func TestSealerKeysAndNonces(t *testing.T) {
	ring, _ := ParseKeyring(testKeyA)
	salts := map[string]bool{}
	parse := func(c string) (salt string, n uint32) {
		raw := mustB64(t, strings.TrimPrefix(c, "k1:"))
		if raw[0] != formatPerSealer || len(raw) != 1+saltSize+counterSize+len("12345678")+16 {
			t.Fatalf("raw ciphertext: format %d, %d bytes", raw[0], len(raw))
		}
		return string(raw[1 : 1+saltSize]), binary.BigEndian.Uint32(raw[1+saltSize:])
	}
	for range 200 {
		c, err := ring.Encrypt(wsA, FieldAccountNumber, "12345678")
		if err != nil {
			t.Fatal(err)
		}
		salt, _ := parse(c)
		if salts[salt] {
			t.Fatal("a salt repeated")
		}
		salts[salt] = true
	}
	for range 5 {
		s, err := ring.NewSealer()
		if err != nil {
			t.Fatal(err)
		}
		var first string
		for i := range 300 {
			c, err := s.Seal(wsA, FieldAccountNumber, "12345678")
			if err != nil {
				t.Fatal(err)
			}
			salt, n := parse(c)
			if i == 0 {
				if salts[salt] {
					t.Fatal("a salt repeated")
				}
				salts[salt], first = true, salt
			}
			if salt != first || n != uint32(i) {
				t.Fatalf("message %d of a sealer: its salt changed or counter %d", i, n)
			}
			if got, err := ring.Decrypt(wsA, FieldAccountNumber, c); err != nil || got != "12345678" {
				t.Fatalf("message %d: Decrypt = %q, %v", i, got, err)
			}
		}
	}
	// Before the counter wraps, a Sealer takes a new salt.
	s, _ := ring.NewSealer()
	s.n = math.MaxUint32
	c1, _ := s.Seal(wsA, FieldAccountNumber, "12345678")
	c2, _ := s.Seal(wsA, FieldAccountNumber, "12345678")
	salt1, n1 := parse(c1)
	salt2, n2 := parse(c2)
	if n1 != math.MaxUint32 || n2 != 0 || salt1 == salt2 {
		t.Errorf("at the counter's end: counters %d, %d, same salt %v; want a new salt from 0", n1, n2, salt1 == salt2)
	}
	// A counter moved to another message's fails to open.
	raw := mustB64(t, strings.TrimPrefix(c2, "k1:"))
	raw[1+saltSize+counterSize-1] ^= 1
	if _, err := ring.Decrypt(wsA, FieldAccountNumber, "k1:"+base64.StdEncoding.EncodeToString(raw)); !errors.Is(err, ErrCiphertext) {
		t.Errorf("a changed counter: %v, want ErrCiphertext", err)
	}
}

// What was stored under format 2 (a key per message) still opens, bound to
// its workspace and field as before.
func TestFormat2StillOpens(t *testing.T) {
	const v2 = "k1:AqzpRX6l2hk/rc7bRs2Cwz+0DY5ZOphL21otajDKEzv/jRQzt0oUTRnlBb41gfKAcWV+SFyYXW41kpULHs7l" // made by the format-2 code
	ring, _ := ParseKeyring(testKeyA)
	if got, err := ring.Decrypt(wsA, FieldCounterpartyIdentifier, v2); err != nil || got != "DE89370400440532013000" {
		t.Fatalf("format 2: Decrypt = %q, %v", got, err)
	}
	if _, err := ring.Decrypt(wsB, FieldCounterpartyIdentifier, v2); !errors.Is(err, ErrCiphertext) {
		t.Errorf("format 2 in another workspace: %v, want ErrCiphertext", err)
	}
	if _, err := ring.Decrypt(wsA, FieldAccountNumber, v2); !errors.Is(err, ErrCiphertext) {
		t.Errorf("format 2 in another field: %v, want ErrCiphertext", err)
	}
	// The same bytes relabelled as format 3 do not open.
	raw := mustB64(t, strings.TrimPrefix(v2, "k1:"))
	raw[0] = formatPerSealer
	if _, err := ring.Decrypt(wsA, FieldCounterpartyIdentifier, "k1:"+base64.StdEncoding.EncodeToString(raw)); !errors.Is(err, ErrCiphertext) {
		t.Errorf("format 2 relabelled 3: %v, want ErrCiphertext", err)
	}
}

// Fingerprints are per workspace and start with the key version.
func TestFingerprintsPerWorkspaceAndVersioned(t *testing.T) {
	f1, err := NewFingerprinter(testFP)
	if err != nil {
		t.Fatal(err)
	}
	a := f1.Identifier(wsA, KindIBAN, "DE89370400440532013000")
	b := f1.Identifier(wsB, KindIBAN, "DE89370400440532013000")
	if a == b {
		t.Error("the same IBAN has the same fingerprint in two workspaces: fingerprints link tenants")
	}
	if !strings.HasPrefix(a, "01") || len(a) != 66 {
		t.Errorf("fingerprint %q: want the version byte 01 and 32 bytes of HMAC", a)
	}
	if f1.Counterparty(wsA, a, "") == f1.Counterparty(wsB, a, "") || f1.Counterparty(wsA, "", "ACME") == f1.Counterparty(wsB, "", "ACME") {
		t.Error("counterparty fingerprints are not per workspace")
	}
	f2, err := NewFingerprinter("2:" + testFP)
	if err != nil {
		t.Fatal(err)
	}
	c := f2.Identifier(wsA, KindIBAN, "DE89370400440532013000")
	if !strings.HasPrefix(c, "02") || c[2:] == a[2:] {
		t.Errorf("version 2 fingerprint %q: want prefix 02 and another HMAC than version 1's", c)
	}
	for _, bad := range []string{"0:" + testFP, "256:" + testFP, "x:" + testFP} {
		if _, err := NewFingerprinter(bad); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("NewFingerprinter(%.6q…) = %v, want ErrInvalidKey", bad, err)
		}
	}
	if f1.Identifier(wsA, KindIBAN, "DE89370400440532013000") != a {
		t.Error("fingerprint is not stable")
	}
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The pooled HKDF-Expand is RFC 5869's, byte for byte.
func TestExpandIsHKDF(t *testing.T) {
	ring, _ := ParseKeyring(testKeyA)
	k := ring.keys["k1"]
	info := []byte(adDomainV3 + "0123456789abcdefghijklmn")
	want, err := hkdf.Expand(sha256.New, k.prk, string(info), 44)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // pooled HMACs are reset between uses
		if got := k.expand(info); !bytes.Equal(got, want) {
			t.Fatalf("expand = %x, want %x", got, want)
		}
	}
}

// Fingerprints are compared with stored ones, so they never change: these
// known answers come from a plain implementation (a pooled HMAC per part).
func TestFingerprintsKnownAnswers(t *testing.T) {
	f, err := NewFingerprinter(testFP)
	if err != nil {
		t.Fatal(err)
	}
	id := f.Identifier(wsA, KindIBAN, "DE89370400440532013000")
	for _, c := range []struct{ got, want string }{
		{id, "0157e12bf60278975130bb44ea509c19c0906ab09e8f6f22e878abf48f3a7faaaa"},
		{f.Counterparty(wsA, id, "x"), "015163e83a7fe5b7705be04b19587bc360eea768147caa5ac456c695a300a5e76f"},
		{f.Counterparty(wsB, "", "ACME Ltd."), "01a9a632e6ba47441b61a8d077dc94e5af1165edd0209ed383074227be16b5af96"},
	} {
		if c.got != c.want {
			t.Errorf("fingerprint %s, want %s", c.got, c.want)
		}
	}
}
