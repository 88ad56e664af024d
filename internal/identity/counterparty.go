package identity

import "github.com/speculapro/speculapro/internal/event"

// ProtectNormalized is Protect for a value already normalised as kind (the
// ingest API normalises while it validates): encrypted for ws and field by
// sealer, or by the Keyring when sealer is nil, masked and fingerprinted.
func (p *Protector) ProtectNormalized(ws event.UUID, field string, kind Kind, normalized string, sealer *Sealer) (Protected, error) {
	var enc string
	var err error
	if sealer != nil {
		enc, err = sealer.Seal(ws, field, normalized)
	} else {
		enc, err = p.Keys.Encrypt(ws, field, normalized)
	}
	if err != nil {
		return Protected{}, err
	}
	return Protected{
		Kind:   kind,
		Enc:    enc,
		Masked: Mask(kind, normalized),
		FP:     p.Fingerprints.Identifier(ws, kind, normalized),
	}, nil
}

// ProtectCounterparty is a counterparty of workspace ws in the only form
// that may leave the ingest API: its identifier (normalised as kind, ""
// for none) encrypted as the field counterparty.identifier (by sealer when
// not nil), masked and fingerprinted, and the counterparty's de-duplication
// fingerprint over that and its name. The counterparty_fingerprint
// processor does the same in two steps, with CounterpartyFingerprint.
func (p *Protector) ProtectCounterparty(ws event.UUID, name string, kind Kind, normalized string, sealer *Sealer) (*event.Counterparty, error) {
	c := &event.Counterparty{Name: name}
	if normalized != "" {
		prot, err := p.ProtectNormalized(ws, FieldCounterpartyIdentifier, kind, normalized, sealer)
		if err != nil {
			return nil, err
		}
		c.IdentifierKind, c.IdentifierEnc, c.IdentifierMasked, c.IdentifierFP = string(kind), prot.Enc, prot.Masked, prot.FP
	}
	c.Fingerprint = p.CounterpartyFingerprint(ws, c.IdentifierFP, name)
	return c, nil
}

// CounterpartyFingerprint is the de-duplication fingerprint of a
// counterparty of ws with the identifier fingerprint identifierFP ("" for
// none) and name, "" when it has neither.
func (p *Protector) CounterpartyFingerprint(ws event.UUID, identifierFP, name string) string {
	return p.Fingerprints.Counterparty(ws, identifierFP, name)
}
