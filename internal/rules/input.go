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
// allocating them per event was a large share of the stream's garbage.
// Nothing a program returns refers to them. The zero value is ready.
type Scratch struct {
	in, ev, feats map[string]any
	secs          map[string]map[string]any
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
// and decode round trip: it runs once per event in the stream), only the
// fields in fields when not nil.
func envelopeInto(m map[string]any, e *event.Envelope, fields map[string]bool) {
	want := func(k string) bool { return fields == nil || fields[k] }
	put := func(k string, v string) {
		if v != "" && want(k) {
			m[k] = v
		}
	}
	if want("v") {
		m["v"] = int64(e.V)
	}
	if want("kind") {
		m["kind"] = string(e.Kind)
	}
	if want("id") {
		m["id"] = e.ID.String()
	}
	if want("workspace_id") {
		m["workspace_id"] = e.WorkspaceID.String()
	}
	if want("external_id") {
		m["external_id"] = e.ExternalID
	}
	if want("occurred_at") {
		m["occurred_at"] = e.OccurredAt.UTC().Format(time.RFC3339Nano)
	}
	if !e.ReceivedAt.IsZero() && want("received_at") {
		m["received_at"] = e.ReceivedAt.UTC().Format(time.RFC3339Nano)
	}
	put("customer_external_id", e.CustomerExternalID)
	put("account_external_id", e.AccountExternalID)
	put("type", e.Type)
	if e.Amount != "" && want("amount") {
		m["amount"] = json.Number(e.Amount)
	}
	put("currency", e.Currency)
	put("direction", string(e.Direction))
	put("status", e.Status)
	put("reference", e.Reference)
	put("channel", e.Channel)
	if c := e.Counterparty; c != nil && want("counterparty") {
		cp := make(map[string]any, 7)
		putString(cp, "name", c.Name)
		putString(cp, "identifier_kind", c.IdentifierKind)
		putString(cp, "identifier_enc", c.IdentifierEnc)
		putString(cp, "identifier_masked", c.IdentifierMasked)
		putString(cp, "identifier_fp", c.IdentifierFP)
		putString(cp, "fingerprint", c.Fingerprint)
		m["counterparty"] = cp
	}
	if want("metadata") {
		if v, ok := jsonObject(e.Metadata); ok {
			m["metadata"] = v
		}
	}
	if d := e.Decision; d != nil && want("decision") {
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
		m["decision"] = dm
	}
	if want("attributes") {
		if v, ok := jsonObject(e.Attributes); ok {
			m["attributes"] = v
		}
	}
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
