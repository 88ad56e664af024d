package apisample

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// The workspace, clock and counterparty protector the samples are read
// with.
var (
	Workspace = event.UUID{0x6f, 0x1c, 0x2b, 0x9e, 0x3d, 0x4a, 0x4f, 0x5b, 0x9c, 0x8d, 0x7e, 0x6f, 0x5a, 0x4b, 0x3c, 0x2d}
	Now       = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	Protector = func() *identity.Protector {
		p, err := identity.NewProtector(identity.DevKeys())
		if err != nil {
			panic(err)
		}
		return p
	}()
)

// Transaction is one valid transaction with every field, its counterparty
// identified by an IBAN.
const Transaction = `{"external_id":"t-1","occurred_at":"2026-11-30T07:41:12.345+01:00","account_external_id":"acc-1",` +
	`"customer_external_id":"cust-1","amount":"1249.90","currency":"EUR","direction":"out","type":"transfer",` +
	`"reference":"rent","metadata":{ "ip": "203.0.113.7" },` +
	`"counterparty":{"name":"Hausverwaltung Müller GmbH","identifier":"DE89 3704 0044 0532 0130 00","identifier_kind":"iban"}}`

// Batch is an ingest request of the items given.
func Batch(items ...string) []byte {
	return []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
}

// WithField returns Transaction with one field set (raw JSON) or removed ("").
func WithField(t *testing.T, field, raw string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(Transaction), &m); err != nil {
		t.Fatal(err)
	}
	if raw == "" {
		delete(m, field)
	} else {
		m[field] = json.RawMessage(raw)
	}
	b, _ := json.Marshal(m)
	return string(b)
}
