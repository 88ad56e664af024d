package identity

import (
	"testing"

	"github.com/speculapro/speculapro/internal/event"
)

// ProtectCounterparty (the ingest API's one step) gives what Protect and
// CounterpartyFingerprint (the counterparty_fingerprint processor's two)
// give for the same counterparty, with the Keyring or a request's Sealer,
// and never holds the clear identifier.
func TestProtectCounterpartyIsTheProcessorsWork(t *testing.T) {
	p, err := NewProtector(testKeyA, testFP)
	if err != nil {
		t.Fatal(err)
	}
	ws := event.UUID{9}
	sealer, err := p.Keys.NewSealer()
	if err != nil {
		t.Fatal(err)
	}
	const raw, name = "DE89 3704 0044 0532 0130 00", "ACME GmbH"
	norm, err := Normalize(KindIBAN, raw)
	if err != nil {
		t.Fatal(err)
	}
	want, err := p.Protect(ws, FieldCounterpartyIdentifier, KindIBAN, raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Sealer{nil, sealer} {
		c, err := p.ProtectCounterparty(ws, name, KindIBAN, norm, s)
		if err != nil {
			t.Fatal(err)
		}
		if c.IdentifierKind != string(want.Kind) || c.IdentifierMasked != want.Masked || c.IdentifierFP != want.FP {
			t.Errorf("sealer %v: kind %q masked %q fp %q, want %q %q %q", s != nil, c.IdentifierKind, c.IdentifierMasked, c.IdentifierFP, want.Kind, want.Masked, want.FP)
		}
		if got, err := p.Keys.Decrypt(ws, FieldCounterpartyIdentifier, c.IdentifierEnc); err != nil || got != norm {
			t.Errorf("sealer %v: decrypts to %q, %v; want the normalised identifier", s != nil, got, err)
		}
		if fp := p.CounterpartyFingerprint(ws, want.FP, name); c.Fingerprint != fp || fp == "" {
			t.Errorf("sealer %v: fingerprint %q, want %q", s != nil, c.Fingerprint, fp)
		}
	}
	onlyName, err := p.ProtectCounterparty(ws, name, "", "", nil)
	if err != nil || onlyName.IdentifierEnc != "" || onlyName.Fingerprint != p.CounterpartyFingerprint(ws, "", name) {
		t.Errorf("a counterparty with only a name: %+v, %v", onlyName, err)
	}
}
