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
	var f any
	if features != nil {
		f = features
	}
	return map[string]any{"event": envelopeValue(env), "features": f}
}

// envelopeValue builds the envelope's JSON shape directly (no encode and
// decode round trip: it runs once per event in the stream).
func envelopeValue(e *event.Envelope) map[string]any {
	m := make(map[string]any, 20)
	m["v"] = int64(e.V)
	m["kind"] = string(e.Kind)
	m["id"] = e.ID.String()
	m["workspace_id"] = e.WorkspaceID.String()
	m["external_id"] = e.ExternalID
	m["occurred_at"] = e.OccurredAt.UTC().Format(time.RFC3339Nano)
	if !e.ReceivedAt.IsZero() {
		m["received_at"] = e.ReceivedAt.UTC().Format(time.RFC3339Nano)
	}
	putString(m, "customer_external_id", e.CustomerExternalID)
	putString(m, "account_external_id", e.AccountExternalID)
	putString(m, "type", e.Type)
	if e.Amount != "" {
		m["amount"] = json.Number(e.Amount)
	}
	putString(m, "currency", e.Currency)
	putString(m, "direction", string(e.Direction))
	putString(m, "status", e.Status)
	putString(m, "reference", e.Reference)
	putString(m, "channel", e.Channel)
	if c := e.Counterparty; c != nil {
		cp := make(map[string]any, 7)
		putString(cp, "name", c.Name)
		putString(cp, "identifier_kind", c.IdentifierKind)
		putString(cp, "identifier_enc", c.IdentifierEnc)
		putString(cp, "identifier_masked", c.IdentifierMasked)
		putString(cp, "identifier_fp", c.IdentifierFP)
		putString(cp, "fingerprint", c.Fingerprint)
		m["counterparty"] = cp
	}
	if v, ok := jsonObject(e.Metadata); ok {
		m["metadata"] = v
	}
	if d := e.Decision; d != nil {
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
	if v, ok := jsonObject(e.Attributes); ok {
		m["attributes"] = v
	}
	return m
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
