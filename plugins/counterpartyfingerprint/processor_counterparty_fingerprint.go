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

func (p *counterpartyFingerprint) processMessage(msg *service.Message) error {
	v, err := msg.AsStructuredMut()
	if err != nil {
		// Not JSON: there is no field to protect, and the bytes cannot be
		// scrubbed field by field. Drop them rather than pass on a payload
		// that may hold clear identifiers.
		// The parser's message is not wrapped: it can quote the payload.
		msg.SetBytes(nil)
		return errNotJSON
	}
	root, ok := v.(map[string]any)
	if !ok {
		msg.SetBytes(nil)
		return errNotObject
	}
	// Ciphertexts and fingerprints are bound to the message's workspace;
	// without one, clear values are still removed below.
	var firstErr error
	wsText, _ := root["workspace_id"].(string)
	ws, wsErr := event.ParseUUID(wsText)
	if wsErr == nil && ws.IsZero() {
		wsErr = errors.New("the nil UUID")
	}
	if wsErr != nil {
		firstErr = fmt.Errorf("workspace_id: %w (identifiers removed)", wsErr)
	}
	// Every path is handled even after a failure, so that no clear value of a
	// failed message leaves the processor; the first error is reported.
	for _, ip := range p.paths {
		if err := p.protectField(root, ip, ws, wsErr != nil); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil && p.counterparty != nil {
		if cp, ok := lookupObject(root, p.counterparty); ok {
			idFP, _ := cp["identifier"+suffixFP].(string)
			name, _ := cp["name"].(string)
			if fp := p.protector.CounterpartyFingerprint(ws, idFP, name); fp != "" {
				cp["fingerprint"] = fp
			} else {
				delete(cp, "fingerprint")
			}
		}
	}
	msg.SetStructuredMut(root)
	return firstErr
}

// protectField replaces the clear identifier at ip, if any, protected for
// workspace ws (noWorkspace: only remove it). On failure the clear value is
// removed all the same.
func (p *counterpartyFingerprint) protectField(root map[string]any, ip identifierPath, ws event.UUID, noWorkspace bool) error {
	obj, ok := lookupObject(root, ip.parent)
	if !ok {
		return nil
	}
	raw, present := obj[ip.field]
	if !present {
		return nil
	}
	delete(obj, ip.field)
	if noWorkspace {
		return nil
	}
	var clear string
	switch x := raw.(type) {
	case nil:
		return nil
	case string:
		clear = x
	default:
		return fmt.Errorf("%s: want a string, got a JSON %s (value removed)", ip.display, jsonType(x))
	}
	if strings.TrimSpace(clear) == "" {
		return nil
	}
	kindField := ip.field + suffixKind
	var kind identity.Kind
	switch k := obj[kindField].(type) {
	case nil:
		kind = identity.InferKind(clear)
	case string:
		if k == "" {
			kind = identity.InferKind(clear)
			break
		}
		var err error
		if kind, err = identity.ParseKind(k); err != nil {
			return fmt.Errorf("%s%s: %w (identifier removed)", ip.display, suffixKind, err)
		}
	default:
		return fmt.Errorf("%s%s: want a string, got a JSON %s (identifier removed)", ip.display, suffixKind, jsonType(k))
	}
	prot, err := p.protector.Protect(ws, ip.display, kind, clear)
	if err != nil {
		return fmt.Errorf("%s: %w (identifier removed)", ip.display, err)
	}
	obj[kindField] = string(prot.Kind)
	obj[ip.field+suffixEnc] = prot.Enc
	obj[ip.field+suffixMasked] = prot.Masked
	obj[ip.field+suffixFP] = prot.FP
	return nil
}

func lookupObject(root map[string]any, path []string) (map[string]any, bool) {
	obj := root
	for _, seg := range path {
		next, ok := obj[seg].(map[string]any)
		if !ok {
			return nil, false
		}
		obj = next
	}
	return obj, true
}

func jsonType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case bool:
		return "boolean"
	case string:
		return "string"
	default:
		return "number"
	}
}

func (p *counterpartyFingerprint) Close(context.Context) error { return nil }
