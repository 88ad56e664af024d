package rules

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// Input is the value a rule's expression runs against: {"event": <the
// envelope as its JSON would decode, with amount as a json.Number so
// `event.amount >= 5000` compares numbers>, "features": features}. Fields the
// envelope's JSON omits are absent here too, so `event.counterparty` is null
// for a cash withdrawal. Evaluate and `speculapro rules test` both build their
// input here, so a rule test sees exactly what the stream sees.
func Input(env *event.Envelope, features map[string]any) map[string]any {
	return input(env, features, nil)
}

// input is Input with only the envelope fields in fields (all when nil):
// a program builds only what its expressions can read.
func input(env *event.Envelope, features map[string]any, fields map[string]bool) map[string]any {
	return inputInto(map[string]any{}, map[string]any{}, env, features, fields)
}

// inputInto is input built in the maps in and ev (emptied first), which a
// Scratch reuses event after event.
func inputInto(in, ev map[string]any, env *event.Envelope, features map[string]any, fields map[string]bool) map[string]any {
	var f any
	if features != nil {
		f = features
	}
	clear(in)
	clear(ev)
	envelopeInto(ev, env, fields)
	in["event"], in["features"] = ev, f
	return in
}

// Scratch holds the maps one goroutine builds its evaluations' inputs in,
// reused event after event (the stream evaluates a batch on one goroutine):
// allocating them per event would be a large share of the stream's garbage.
// Nothing a program returns refers to them. The zero value is ready.
type Scratch struct {
	in, ev, feats map[string]any
	secs          map[string]map[string]any
	ctx           evalCtx
	outs          []outcome
	types         []string
}

// outcomes is a slice of n outcomes, reused.
func (sc *Scratch) outcomes(n int) []outcome {
	if cap(sc.outs) < n {
		sc.outs = make([]outcome, n)
	}
	sc.outs = sc.outs[:n]
	return sc.outs
}

// features is the features kp's rules name, taken from f, in the
// scratch's maps.
func (sc *Scratch) features(kp *kindProgram, f Features) map[string]any {
	if sc.feats == nil {
		sc.feats, sc.secs = map[string]any{}, map[string]map[string]any{}
	}
	clear(sc.feats)
	for sec, names := range kp.needs {
		if !f.Has(sec) {
			sc.feats[sec] = nil
			continue
		}
		sm := sc.secs[sec]
		if sm == nil {
			sm = make(map[string]any, len(names))
			sc.secs[sec] = sm
		}
		clear(sm)
		for _, n := range names {
			if v := f.Feature(sec, n); v != nil {
				sm[n] = v
			}
		}
		sc.feats[sec] = sm
	}
	return sc.feats
}

// input is the input of env and features in the scratch's maps.
func (sc *Scratch) input(env *event.Envelope, features map[string]any, fields map[string]bool) map[string]any {
	if sc.in == nil {
		sc.in, sc.ev = map[string]any{}, map[string]any{}
	}
	return inputInto(sc.in, sc.ev, env, features, fields)
}

// envelopeInto builds the envelope's JSON shape directly in m (no encode
// and decode round trip), only the fields in fields when not nil.
func envelopeInto(m map[string]any, e *event.Envelope, fields map[string]bool) {
	for _, k := range envelopeNames {
		if fields != nil && !fields[k] {
			continue
		}
		if v, ok := envelopeValue(e, k); ok {
			m[k] = v
		}
	}
}

// envelopeNames are the envelope's JSON fields, in its order.
var envelopeNames = []string{"v", "kind", "id", "workspace_id", "external_id", "occurred_at", "received_at",
	"customer_external_id", "account_external_id", "type", "amount", "currency", "direction", "status",
	"reference", "channel", "counterparty", "metadata", "decision", "attributes"}

// stringField says whether the envelope's field k is a string in its JSON.
func stringField(k string) bool {
	switch k {
	case "v", "amount", "counterparty", "metadata", "decision", "attributes":
		return false
	}
	for _, n := range envelopeNames {
		if n == k {
			return true
		}
	}
	return false
}

// envelopeString is the string field k as the envelope's JSON has it;
// false when the JSON omits it (an empty optional field) or k is not a
// string field. The native evaluator reads it without building the map.
func envelopeString(e *event.Envelope, k string) (string, bool) {
	opt := func(v string) (string, bool) { return v, v != "" }
	switch k {
	case "kind":
		return string(e.Kind), true
	case "id":
		return e.ID.String(), true
	case "workspace_id":
		return e.WorkspaceID.String(), true
	case "external_id":
		return e.ExternalID, true
	case "occurred_at":
		return e.OccurredAt.UTC().Format(time.RFC3339Nano), true
	case "received_at":
		if e.ReceivedAt.IsZero() {
			return "", false
		}
		return e.ReceivedAt.UTC().Format(time.RFC3339Nano), true
	case "customer_external_id":
		return opt(e.CustomerExternalID)
	case "account_external_id":
		return opt(e.AccountExternalID)
	case "type":
		return opt(e.Type)
	case "currency":
		return opt(e.Currency)
	case "direction":
		return opt(string(e.Direction))
	case "status":
		return opt(e.Status)
	case "reference":
		return opt(e.Reference)
	case "channel":
		return opt(e.Channel)
	}
	return "", false
}

// envelopeValue is the envelope's field k as the input's event map holds
// it (amount a json.Number, so `event.amount >= 5000` compares numbers;
// metadata and attributes decoded with numbers as json.Number); false when
// the JSON omits it.
func envelopeValue(e *event.Envelope, k string) (any, bool) {
	switch k {
	case "v":
		return int64(e.V), true
	case "amount":
		if e.Amount == "" {
			return nil, false
		}
		return json.Number(e.Amount), true
	case "counterparty":
		c := e.Counterparty
		if c == nil {
			return nil, false
		}
		cp := make(map[string]any, 7)
		putString(cp, "name", c.Name)
		putString(cp, "identifier_kind", c.IdentifierKind)
		putString(cp, "identifier_enc", c.IdentifierEnc)
		putString(cp, "identifier_masked", c.IdentifierMasked)
		putString(cp, "identifier_fp", c.IdentifierFP)
		putString(cp, "fingerprint", c.Fingerprint)
		return cp, true
	case "metadata":
		return jsonObject(e.Metadata)
	case "attributes":
		return jsonObject(e.Attributes)
	case "decision":
		d := e.Decision
		if d == nil {
			return nil, false
		}
		dm := map[string]any{"outcome": string(d.Outcome), "score": d.Score}
		if len(d.Reasons) > 0 {
			reasons := make([]any, len(d.Reasons))
			for i, r := range d.Reasons {
				reasons[i] = r
			}
			dm["reasons"] = reasons
		}
		if !d.DecidedAt.IsZero() {
			dm["decided_at"] = d.DecidedAt.UTC().Format(time.RFC3339Nano)
		}
		return dm, true
	}
	if s, ok := envelopeString(e, k); ok {
		return s, true
	}
	return nil, false
}

func putString(m map[string]any, k, v string) {
	if v != "" {
		m[k] = v
	}
}

// jsonObject decodes a metadata or attributes object with numbers kept as
// json.Number, as every other number a rule sees.
func jsonObject(raw json.RawMessage) (any, bool) {
	if len(raw) == 0 {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}
