package counterpartyfingerprint

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

const (
	cfpFieldIdentifierPaths  = "identifier_paths"
	cfpFieldCounterpartyPath = "counterparty_path"
)

// Suffixes of the fields that replace a clear identifier field F: F_kind
// (read, then rewritten normalised), F_enc, F_masked and F_fp.
const (
	suffixKind   = "_kind"
	suffixEnc    = "_enc"
	suffixMasked = "_masked"
	suffixFP     = "_fp"
)

func counterpartyFingerprintSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Utility").
		Summary("Replaces clear identifiers (IBANs, account numbers, phone numbers) in JSON messages with their encrypted, masked and keyed-fingerprint forms, and sets each counterparty's de-duplication fingerprint.").
		Description(`
For every path in `+"`"+cfpFieldIdentifierPaths+"`"+` whose field F holds a clear identifier, the value
is normalised (an IBAN's checksum is validated), then F is removed and replaced by siblings
`+"`F_enc`"+` (AES-256-GCM, prefixed with the key id, e.g. `+"`k1:…`"+`), `+"`F_masked`"+` (e.g.
`+"`DE89 **** **** **** 3000`"+`) and `+"`F_fp`"+` (hex HMAC-SHA256 of the kind and normalised value), and
`+"`F_kind`"+` is set to the normalised kind. The ciphertext is bound to the message's `+"`workspace_id`"+`
and to the path (decrypting it for another workspace or field fails), and the fingerprint is keyed
per workspace and starts with the fingerprint key's version byte. The kind is read from `+"`F_kind`"+` (iban, account_number
or phone); without one, a value that passes the IBAN checks is an IBAN, one starting with + a phone
number, anything else an account number.

A monitored account's number and a counterparty's identifier of the same kind and value get the same
`+"`F_fp`"+`, which links a payment to one of our own customers without decrypting anything. An IBAN and a
bare domestic account number never match each other: send the IBAN where you have it.

The object at `+"`"+cfpFieldCounterpartyPath+"`"+` then gets a `+"`fingerprint`"+` that de-duplicates counterparties:
derived from its `+"`identifier_fp`"+` when it has one, else from its normalised `+"`name`"+`.

A message whose identifier is invalid fails (the error names the field and the reason, never the
value) and the rest of the batch proceeds. Even a failed message leaves without the clear value: every
clear identifier field is removed before the message is passed on, so nothing clear ever leaves this
processor. Messages already processed pass through unchanged, so running it twice is harmless.`).
		Fields(identity.KeyFields()...).
		Fields(
			service.NewStringListField(cfpFieldIdentifierPaths).
				Description("Dot-separated paths of the fields that may hold a clear identifier. A missing, null or empty field is skipped.").
				Default([]any{"counterparty.identifier", "account_number"}).
				Advanced(),
			service.NewStringField(cfpFieldCounterpartyPath).
				Description("Dot-separated path of the counterparty object that gets a de-duplication `fingerprint`; empty disables it.").
				Default("counterparty").
				Advanced(),
		)
}

func init() {
	service.MustRegisterBatchProcessor("counterparty_fingerprint", counterpartyFingerprintSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchProcessor, error) {
			return newCounterpartyFingerprintFromParsed(conf)
		})
}

// identifierPath locates one clear identifier field: the path of the object
// holding it and the field's name.
type identifierPath struct {
	display string   // "counterparty.identifier", used in errors
	parent  []string // path of the holding object; empty for the root
	field   string
}

type counterpartyFingerprint struct {
	protector    *identity.Protector
	paths        []identifierPath
	counterparty []string // nil: no de-duplication fingerprint
}

func newCounterpartyFingerprintFromParsed(conf *service.ParsedConfig) (*counterpartyFingerprint, error) {
	protector, err := identity.ProtectorFromParsed(conf)
	if err != nil {
		return nil, fmt.Errorf("counterparty_fingerprint: %w", err)
	}
	rawPaths, err := conf.FieldStringList(cfpFieldIdentifierPaths)
	if err != nil {
		return nil, err
	}
	p := &counterpartyFingerprint{protector: protector}
	for _, raw := range rawPaths {
		segs, err := splitPath(raw)
		if err != nil {
			return nil, fmt.Errorf("counterparty_fingerprint: %s: %w", cfpFieldIdentifierPaths, err)
		}
		p.paths = append(p.paths, identifierPath{display: raw, parent: segs[:len(segs)-1], field: segs[len(segs)-1]})
	}
	cpPath, err := conf.FieldString(cfpFieldCounterpartyPath)
	if err != nil {
		return nil, err
	}
	if cpPath != "" {
		if p.counterparty, err = splitPath(cpPath); err != nil {
			return nil, fmt.Errorf("counterparty_fingerprint: %s: %w", cfpFieldCounterpartyPath, err)
		}
	}
	return p, nil
}

func splitPath(s string) ([]string, error) {
	segs := strings.Split(s, ".")
	for _, seg := range segs {
		if seg == "" {
			return nil, fmt.Errorf("path %q has an empty segment", s)
		}
	}
	return segs, nil
}

// ProcessBatch protects each message on its own: a failure marks that
// message (msg.SetError) and the others proceed.
func (p *counterpartyFingerprint) ProcessBatch(_ context.Context, batch service.MessageBatch) ([]service.MessageBatch, error) {
	for _, msg := range batch {
		if err := p.processMessage(msg); err != nil {
			msg.SetError(fmt.Errorf("counterparty_fingerprint: %w", err))
		}
	}
	return []service.MessageBatch{batch}, nil
}

// Sentinel errors of a message that cannot be processed at all; its content
// is dropped because it cannot be scrubbed field by field.
var (
	errNotJSON   = errors.New("message is not JSON, content dropped")
	errNotObject = errors.New("message is not a JSON object, content dropped")
)

// processMessage reads the message as the ingest API reads a request
// (event.CheckJSON, then event.AppendMembers and event.Unquote for the
// members on the paths), protects each identifier as the ingest API does
// (identity.ReadClear, ProtectNormalized, CounterpartyFingerprint) and
// rewrites only the objects it changed (objectEdit); every other byte is
// passed on as it came.
func (p *counterpartyFingerprint) processMessage(msg *service.Message) error {
	raw, err := msg.AsBytes()
	var fault *event.JSONFault
	if err != nil || errors.As(event.CheckJSON(raw), &fault) && fault.Syntax {
		// Not JSON: there is no field to protect, and the bytes cannot be
		// scrubbed field by field. Drop them rather than pass on a payload
		// that may hold clear identifiers.
		// The parser's message is not wrapped: it can quote the payload.
		msg.SetBytes(nil)
		return errNotJSON
	}
	root, ok := event.AppendMembers(nil, raw)
	if !ok {
		msg.SetBytes(nil)
		return errNotObject
	}
	// Ciphertexts and fingerprints are bound to the message's workspace;
	// without one, clear values are still removed below.
	var firstErr error
	wsText, _ := memberString(root, "workspace_id")
	ws, wsErr := event.ParseUUID(wsText)
	if wsErr == nil && ws.IsZero() {
		wsErr = errors.New("the nil UUID")
	}
	if wsErr != nil {
		firstErr = fmt.Errorf("workspace_id: %w (identifiers removed)", wsErr)
	}
	// Every path is handled even after a failure, so that no clear value of a
	// failed message leaves the processor; the first error is reported.
	out := raw
	for _, ip := range p.paths {
		out = editObject(out, ip.parent, func(obj *objectEdit) {
			if err := p.protectField(obj, ip, ws, wsErr != nil); err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	if firstErr == nil && p.counterparty != nil {
		out = editObject(out, p.counterparty, func(cp *objectEdit) {
			idFP, _ := memberString(cp.members, "identifier"+suffixFP)
			name, _ := memberString(cp.members, "name")
			cp.setString("fingerprint", p.protector.CounterpartyFingerprint(ws, idFP, name))
		})
	}
	if &out[0] != &raw[0] || len(out) != len(raw) {
		msg.SetBytes(out)
	}
	return firstErr
}

// protectField replaces the clear identifier field of obj, if any,
// protected for workspace ws (noWorkspace: only remove it). On failure the
// clear value is removed all the same.
func (p *counterpartyFingerprint) protectField(obj *objectEdit, ip identifierPath, ws event.UUID, noWorkspace bool) error {
	value, present := obj.remove(ip.field)
	if !present || noWorkspace || value[0] == 'n' {
		return nil
	}
	clear, ok := event.Unquote(value)
	if !ok {
		return fmt.Errorf("%s: want a string, got a JSON %s (value removed)", ip.display, jsonType(value))
	}
	if strings.TrimSpace(clear) == "" {
		return nil
	}
	kindField := ip.field + suffixKind
	var kind identity.Kind
	if k, present := obj.get(kindField); present && k[0] != 'n' {
		text, ok := event.Unquote(k)
		if !ok {
			return fmt.Errorf("%s%s: want a string, got a JSON %s (identifier removed)", ip.display, suffixKind, jsonType(k))
		}
		if text != "" {
			var err error
			if kind, err = identity.ParseKind(text); err != nil {
				return fmt.Errorf("%s%s: %w (identifier removed)", ip.display, suffixKind, err)
			}
		}
	}
	kind, norm, err := identity.ReadClear(kind, clear)
	if err != nil {
		return fmt.Errorf("%s: %w (identifier removed)", ip.display, err)
	}
	prot, err := p.protector.ProtectNormalized(ws, ip.display, kind, norm, nil)
	if err != nil {
		return fmt.Errorf("%s: %w (identifier removed)", ip.display, err)
	}
	for _, f := range []string{suffixKind, suffixEnc, suffixMasked, suffixFP} {
		obj.remove(ip.field + f)
	}
	obj.add(kindField, string(prot.Kind))
	obj.add(ip.field+suffixEnc, prot.Enc)
	obj.add(ip.field+suffixMasked, prot.Masked)
	obj.add(ip.field+suffixFP, prot.FP)
	return nil
}

func (p *counterpartyFingerprint) Close(context.Context) error { return nil }
