package counterpartyfingerprint

import (
	"bytes"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// TestSameAsIngestAPI: for the same counterparty and keys, the processor
// writes what the ingest API's inline protection writes into the record:
// the same members in the same order, the same bytes for the kind, mask
// and both fingerprints, and a ciphertext (random nonce) that decrypts to
// the same normalised value.
func TestSameAsIngestAPI(t *testing.T) {
	p := newTestProcessor(t, testKey1)
	prot, err := identity.NewProtector(testKey1, testFP)
	if err != nil {
		t.Fatal(err)
	}
	ws := mustWS(t)
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	for _, cp := range []string{
		`{"name":"ACME Ltd","identifier":"de89 3704 0044 0532 0130 00","identifier_kind":"iban"}`,
		`{"name":"Hausverwaltung Müller GmbH","identifier":"GB82 WEST 1234 5698 7654 32"}`,
		`{"identifier":"0049 (171) 123-4567","identifier_kind":"phone"}`,
		`{"name":"Kiosk","identifier":"0532-0130-00","identifier_kind":"account_number"}`,
		`{"identifier":"0532.0130.00"}`,
		`{"name":"Corner Shop"}`,
		`{"name":"Café \"Zum Hirschen\" <& Söhne>"}`,
	} {
		t.Run(cp, func(t *testing.T) {
			item := `{"external_id":"t-1","occurred_at":"2026-11-30T07:41:12Z","account_external_id":"acc-1","amount":"1.00",` +
				`"currency":"EUR","direction":"out","counterparty":` + cp + `}`
			items, err := apirequest.DecodeBatch([]byte(`{"items":[`+item+`]}`), event.KindTransaction, ws, now, 10, prot)
			if err != nil || len(items) != 1 || len(items[0].Errors) > 0 {
				t.Fatalf("the ingest API refused the item: %v %+v", err, items)
			}
			want := member(t, items[0].Item.Value, "counterparty")
			outs, errs := run(t, p, `{"counterparty":`+cp+`}`)
			if errs[0] != nil {
				t.Fatal(errs[0])
			}
			got := member(t, outs[0], "counterparty")
			sameCounterparty(t, prot, ws, got, want)
		})
	}
}

// member is the value of root's member key.
func member(t *testing.T, root []byte, key string) []byte {
	t.Helper()
	ms, ok := event.AppendMembers(nil, root)
	if !ok {
		t.Fatalf("not an object: %s", root)
	}
	for _, m := range ms {
		if string(m.Key) == key {
			return m.Value
		}
	}
	t.Fatalf("no %s in %s", key, root)
	return nil
}

// sameCounterparty compares the processor's counterparty object with the
// ingest API's, member by member.
func sameCounterparty(t *testing.T, prot *identity.Protector, ws event.UUID, got, want []byte) {
	t.Helper()
	g, _ := event.AppendMembers(nil, got)
	w, _ := event.AppendMembers(nil, want)
	if len(g) != len(w) {
		t.Fatalf("processor %s, ingest API %s", got, want)
	}
	for i := range w {
		key := string(w[i].Key)
		if string(g[i].Key) != key {
			t.Fatalf("member %d: processor %q, ingest API %q (%s, %s)", i, g[i].Key, key, got, want)
		}
		gv, _ := event.Unquote(g[i].Value)
		wv, _ := event.Unquote(w[i].Value)
		switch key {
		case "identifier_enc":
			gc, gerr := prot.Keys.Decrypt(ws, identity.FieldCounterpartyIdentifier, gv)
			wc, werr := prot.Keys.Decrypt(ws, identity.FieldCounterpartyIdentifier, wv)
			if gerr != nil || werr != nil || gc != wc {
				t.Errorf("identifier_enc decrypts to %q (%v) from the processor, %q (%v) from the ingest API", gc, gerr, wc, werr)
			}
		case "name":
			// The client's bytes pass the processor as they came; the
			// ingest API writes the value again. The value is the same.
			if gv != wv {
				t.Errorf("name: processor %q, ingest API %q", gv, wv)
			}
		default:
			if !bytes.Equal(g[i].Value, w[i].Value) {
				t.Errorf("%s: processor %s, ingest API %s", key, g[i].Value, w[i].Value)
			}
		}
	}
}
