package apirequest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/apisample"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

func TestDecodeValidTransaction(t *testing.T) {
	got, err := DecodeBatch(apisample.Batch(apisample.Transaction), event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector)
	if err != nil || len(got) != 1 || len(got[0].Errors) != 0 {
		t.Fatalf("decodeBatch = %+v, %v", got, err)
	}
	it := got[0].Item
	occurred := time.Date(2026, 11, 30, 6, 41, 12, 345e6, time.UTC)
	if want := event.TransactionID(apisample.Workspace, "t-1", occurred); it.ID != want {
		t.Errorf("id = %s, want TransactionID = %s", it.ID, want)
	}
	if it.Key != apisample.Workspace.String()+":acc-1" {
		t.Errorf("key = %q", it.Key)
	}
	// The envelope is what the persister reads, the counterparty in the
	// form counterparty_fingerprint gives it: no clear identifier leaves.
	if strings.Contains(string(it.Value), "3704") || strings.Contains(string(it.Value), `"identifier"`) {
		t.Errorf("value holds the clear identifier: %s", it.Value)
	}
	want, err := apisample.Protector.Protect(apisample.Workspace, identity.FieldCounterpartyIdentifier, identity.KindIBAN, "DE89 3704 0044 0532 0130 00")
	if err != nil {
		t.Fatal(err)
	}
	e, err := event.Decode(it.Value)
	if err != nil {
		t.Fatalf("event.Decode: %v", err)
	}
	if e.ID != it.ID || e.WorkspaceID != apisample.Workspace || e.Amount != "1249.90" || !e.OccurredAt.Equal(occurred) ||
		string(e.Metadata) != `{"ip":"203.0.113.7"}` || !e.ReceivedAt.Equal(apisample.Now) {
		t.Errorf("envelope = %+v", e)
	}
	cp := e.Counterparty
	if cp == nil || cp.Name != "Hausverwaltung Müller GmbH" || cp.IdentifierKind != "iban" || cp.IdentifierFP != want.FP ||
		cp.IdentifierMasked != want.Masked || cp.Fingerprint != apisample.Protector.Fingerprints.Counterparty(apisample.Workspace, want.FP, cp.Name) {
		t.Fatalf("counterparty = %+v, want %+v", cp, want)
	}
	if clear, err := apisample.Protector.Keys.Decrypt(apisample.Workspace, identity.FieldCounterpartyIdentifier, cp.IdentifierEnc); err != nil || clear != "DE89370400440532013000" {
		t.Errorf("identifier_enc decrypts to %q, %v", clear, err)
	}
}

func TestDecodeRejectsWithFieldPaths(t *testing.T) {
	tests := []struct {
		name  string
		item  string
		field string
		msg   string
	}{
		{"amount as number", apisample.WithField(t, "amount", `1249.9`), "items[0].amount", "not a JSON number"},
		{"amount exponent", apisample.WithField(t, "amount", `"1e3"`), "items[0].amount", "decimal string"},
		{"amount negative", apisample.WithField(t, "amount", `"-5.00"`), "items[0].amount", "negative"},
		{"amount 5 decimals", apisample.WithField(t, "amount", `"1.00001"`), "items[0].amount", "4 decimal places"},
		{"amount missing", apisample.WithField(t, "amount", ""), "items[0].amount", "required"},
		{"currency lower case", apisample.WithField(t, "currency", `"eur"`), "items[0].currency", "ISO 4217"},
		{"currency unknown", apisample.WithField(t, "currency", `"ABC"`), "items[0].currency", "ISO 4217"},
		{"time not RFC 3339", apisample.WithField(t, "occurred_at", `"2026-11-30 07:41"`), "items[0].occurred_at", "RFC 3339"},
		{"time far future", apisample.WithField(t, "occurred_at", `"2027-11-30T07:41:00Z"`), "items[0].occurred_at", "future"},
		{"time before 1970", apisample.WithField(t, "occurred_at", `"1969-12-31T23:59:59Z"`), "items[0].occurred_at", "1970"},
		{"time before the oldest partition", apisample.WithField(t, "occurred_at", `"`+apisample.Now.AddDate(0, -3, 0).Format(time.RFC3339)+`"`), "items[0].occurred_at", "oldest month stored"},
		{"direction enum", apisample.WithField(t, "direction", `"sideways"`), "items[0].direction", "in, out"},
		{"external_id empty", apisample.WithField(t, "external_id", `""`), "items[0].external_id", "must not be empty"},
		{"external_id too long", apisample.WithField(t, "external_id", `"`+strings.Repeat("x", 129)+`"`), "items[0].external_id", "at most 128"},
		{"account missing", apisample.WithField(t, "account_external_id", ""), "items[0].account_external_id", "required"},
		{"reference control char", apisample.WithField(t, "reference", `"a\u0001b"`), "items[0].reference", "control"},
		{"reference NUL", apisample.WithField(t, "reference", `"a\u0000b"`), "items[0].reference", `\u0000 in a string`},
		{"metadata not object", apisample.WithField(t, "metadata", `[1]`), "items[0].metadata", "object"},
		{"bad IBAN checksum", apisample.WithField(t, "counterparty", `{"identifier":"DE89370400440532013001","identifier_kind":"iban"}`), "items[0].counterparty.identifier", "checksum"},
		{"bad kind", apisample.WithField(t, "counterparty", `{"identifier":"12345678","identifier_kind":"email"}`), "items[0].counterparty.identifier_kind", "iban, account_number, phone"},
		{"phone without prefix", apisample.WithField(t, "counterparty", `{"identifier":"0171 1234567","identifier_kind":"phone"}`), "items[0].counterparty.identifier", "international prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeBatch(apisample.Batch(tt.item), event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector)
			if err != nil {
				t.Fatalf("request refused as a whole: %v", err)
			}
			var found bool
			for _, fe := range got[0].Errors {
				if fe.Field == tt.field && strings.Contains(fe.Message, tt.msg) {
					found = true
				}
				if strings.Contains(fe.Message, "0532") || strings.Contains(fe.Message, "1234567") {
					t.Errorf("error quotes the identifier: %+v", fe)
				}
			}
			if !found {
				t.Errorf("errors = %+v; want %s containing %q", got[0].Errors, tt.field, tt.msg)
			}
		})
	}
}

func TestDecodeReportsEveryErrorOfAnItem(t *testing.T) {
	bad := `{"external_id":"t-1","occurred_at":"yesterday","account_external_id":"acc-1","amount":12,"currency":"euro","direction":"up"}`
	got, err := DecodeBatch(apisample.Batch(apisample.Transaction, bad), event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector)
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0].Errors) != 0 {
		t.Errorf("valid item rejected: %+v", got[0].Errors)
	}
	var fields []string
	for _, fe := range got[1].Errors {
		fields = append(fields, fe.Field)
	}
	if want := "items[1].occurred_at items[1].amount items[1].currency items[1].direction"; strings.Join(fields, " ") != want {
		t.Errorf("error fields = %v; want %s", fields, want)
	}
}

func TestDecodeRefusesWholeRequests(t *testing.T) {
	many := make([]string, 11)
	for i := range many {
		many[i] = apisample.Transaction
	}
	tests := []struct {
		name string
		body string
		want error
		msg  string
	}{
		{"empty body", ``, ErrMalformed, "empty body"},
		{"not JSON", `{"items":[`, ErrMalformed, "ends early"},
		{"trailing data", `{"items":[]} {}`, ErrMalformed, "after the JSON value"},
		{"array", `[1]`, ErrMalformed, "object"},
		{"items not array", `{"items":{}}`, ErrMalformed, "array"},
		{"item not object", `{"items":[1]}`, ErrMalformed, "items[0]"},
		{"no items", `{"items":[]}`, errNoItems, "empty"},
		{"unknown top-level field", `{"items":[` + apisample.Transaction + `],"workspace_id":"x"}`, ErrUnknownField, `"workspace_id"`},
		{"duplicate top-level key", `{"items":[` + apisample.Transaction + `],"items":[` + apisample.Transaction + `]}`, ErrMalformed, `items: key named twice`},
		{"too many", string(apisample.Batch(many...)), ErrTooManyItems, "at most 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeBatch([]byte(tt.body), event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v; want %v containing %q", err, tt.want, tt.msg)
			}
		})
	}
}

func TestDecodeAccountEvent(t *testing.T) {
	ev := `{"external_id":"ev-1","occurred_at":"2026-11-30T07:00:00Z","customer_external_id":"cust-1","type":"sim_swap","attributes":{"carrier":"T"}}`
	got, err := DecodeBatch(apisample.Batch(ev, `{"external_id":"ev-2","occurred_at":"2026-11-30T07:00:00Z"}`), event.KindAccountEvent, apisample.Workspace, apisample.Now, 10, apisample.Protector)
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0].Errors) != 0 || got[0].Item.Key != apisample.Workspace.String()+":cust-1" ||
		got[0].Item.ID != event.AccountEventID(apisample.Workspace, "ev-1", time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)) {
		t.Errorf("item 0 = %+v", got[0])
	}
	if _, err := event.Decode(got[0].Item.Value); err != nil {
		t.Errorf("event.Decode: %v", err)
	}
	if fmt.Sprint(got[1].Errors) != "[{items[1].customer_external_id required} {items[1].type required}]" {
		t.Errorf("item 1 errors = %v", got[1].Errors)
	}
}

// FuzzDecodeBatch: whatever the body, the decoder neither panics nor lets
// an item through that the persister could not read.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(string(apisample.Batch(apisample.Transaction)))
	f.Add(`{"items":[{"external_id":"a","occurred_at":"2026-11-30T07:00:00Z","account_external_id":"b","amount":"1","currency":"EUR","direction":"in","counterparty":{"identifier":"+4917112345678"}}]}`)
	f.Add(`{"items":[{"amount":1e400}]}`)
	f.Add(`{"items":[null,{},[]]}`)
	f.Add(`{"items":[{"external_id":"\ud800","occurred_at":"2026-02-30T00:00:00Z"}]}`)
	f.Add(`{"items":[{"metadata":{"a":{"b":[1,2,{"c":null}]}},"counterparty":null}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		for _, kind := range []event.Kind{event.KindTransaction, event.KindAccountEvent} {
			got, err := DecodeBatch([]byte(body), kind, apisample.Workspace, apisample.Now, 50, apisample.Protector)
			if err != nil {
				continue
			}
			for _, p := range got {
				if len(p.Errors) > 0 {
					continue
				}
				e, derr := event.Decode(p.Item.Value)
				if derr != nil {
					t.Fatalf("accepted item the persister cannot read: %v\n%s", derr, p.Item.Value)
				}
				if e.ID != p.Item.ID || e.WorkspaceID != apisample.Workspace {
					t.Fatalf("envelope id/workspace = %s/%s, want %s/%s", e.ID, e.WorkspaceID, p.Item.ID, apisample.Workspace)
				}
			}
		}
	})
}

// BenchmarkDecodeBatch measures validating a 500-item request into
// envelopes, beside a baseline measured in the same run: encoding/json
// reading the same body into plain structs with no validation at all.
// Reports items/s, baseline items/s and their ratio.
func BenchmarkDecodeBatch(b *testing.B) {
	items := make([]string, 500)
	for i := range items {
		items[i] = apisample.Transaction
	}
	body := apisample.Batch(items...)
	type plain struct {
		Items []struct {
			ExternalID, OccurredAt, AccountExternalID, CustomerExternalID string
			Amount, Currency, Direction, Type, Reference                  string
			Metadata                                                      json.RawMessage
			Counterparty                                                  struct{ Name, Identifier, IdentifierKind string }
		}
	}
	start := time.Now()
	rounds := 0
	for ; rounds < 20 || time.Since(start) < 500*time.Millisecond; rounds++ {
		var p plain
		if err := json.Unmarshal(body, &p); err != nil {
			b.Fatal(err)
		}
	}
	baseline := float64(rounds*len(items)) / time.Since(start).Seconds()

	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	start = time.Now()
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := DecodeBatch(body, event.KindTransaction, apisample.Workspace, apisample.Now, 1000, apisample.Protector); err != nil {
			b.Fatal(err)
		}
	}
	// CPU time, the collector's included, is what an item costs the
	// process; wall time on a shared machine is mostly its neighbours'.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*len(items)), "cpu-ns/item")
	rate := float64(b.N*len(items)) / time.Since(start).Seconds()
	b.ReportMetric(rate, "items/s")
	b.ReportMetric(baseline, "plain-json-items/s")
	b.ReportMetric(rate/baseline, "decode/plain")
}

// An unknown field rejects its item alone, like any other
// validation error: the request's other items are decided as usual.
func TestUnknownFieldRejectsItsItem(t *testing.T) {
	body := apisample.Batch(apisample.Transaction, apisample.WithField(t, "workspace_id", `"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2e"`),
		apisample.WithField(t, "counterparty", `{"name":"x","iban":"DE89"}`))
	items, err := DecodeBatch(body, event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector)
	if err != nil {
		t.Fatal(err)
	}
	if len(items[0].Errors) != 0 {
		t.Errorf("item 0: %v", items[0].Errors)
	}
	for i, want := range map[int]string{1: "items[1].workspace_id", 2: "items[2].counterparty.iban"} {
		if e := items[i].Errors; len(e) != 1 || e[0].Field != want || e[0].Message != "unknown field" {
			t.Errorf("item %d errors = %v, want unknown field %s", i, e, want)
		}
	}
}

// Item 5: what PostgreSQL would refuse or read differently is rejected on
// its item, before anything reaches Kafka: duplicate keys (a parser
// differential), \u0000 and numbers numeric cannot hold in metadata, an
// external_id of only whitespace.
func TestDecodeRefusesWhatTheDatabaseWould(t *testing.T) {
	dupAmount := strings.Replace(apisample.Transaction, `"amount":"1249.90"`, `"amount":"10.00","amount":"99999.00"`, 1)
	if dupAmount == apisample.Transaction {
		t.Fatal("apisample.Transaction has no amount 1249.90")
	}
	tests := map[string]struct{ item, field, msg string }{
		"duplicate amount":   {dupAmount, "items[1].amount", `key named twice`},
		"duplicate in meta":  {apisample.WithField(t, "metadata", `{"a":1,"a":2}`), "items[1].metadata.a", `key named twice`},
		"NUL in metadata":    {apisample.WithField(t, "metadata", `{"note":"a\u0000b"}`), "items[1].metadata.note", `\u0000`},
		"huge number":        {apisample.WithField(t, "metadata", `{"n":1e999999}`), "items[1].metadata.n", "digits"},
		"lone surrogate":     {apisample.WithField(t, "metadata", `{"n":"\ud800"}`), "items[1].metadata.n", "surrogate"},
		"whitespace id":      {apisample.WithField(t, "external_id", `"   "`), "items[1].external_id", "whitespace"},
		"whitespace account": {apisample.WithField(t, "account_external_id", `"\u00a0"`), "items[1].account_external_id", "whitespace"},
		"NUL in external_id": {apisample.WithField(t, "external_id", `"t\u0000"`), "items[1].external_id", `\u0000`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			items, err := DecodeBatch(apisample.Batch(apisample.Transaction, tt.item), event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector)
			if err != nil {
				t.Fatalf("request refused as a whole: %v", err)
			}
			if len(items[0].Errors) != 0 {
				t.Errorf("the valid item was rejected: %v", items[0].Errors)
			}
			found := false
			for _, e := range items[1].Errors {
				if e.Field == tt.field && strings.Contains(e.Message, tt.msg) {
					found = true
				}
			}
			if !found {
				t.Errorf("errors = %v, want %s: …%s…", items[1].Errors, tt.field, tt.msg)
			}
		})
	}
}

// The items' strings are cut from the body: a slice of the body maps to
// its own text, anything else (a copy, a slice of another buffer, past the
// end) is not cut.
func TestBodyTextCut(t *testing.T) {
	body := []byte(`{"items":[{"external_id":"t-1"}]}`)
	text := newBodyText(body)
	i := bytes.Index(body, []byte("t-1"))
	if s, ok := text.cut(body[i : i+3]); !ok || s != "t-1" {
		t.Errorf("cut of the body's own bytes = %q %v", s, ok)
	}
	if s, ok := text.cut(body[len(body)-2:]); !ok || s != "]}" {
		t.Errorf("cut of the body's last bytes = %q %v", s, ok)
	}
	other := bytes.Clone(body)
	if _, ok := text.cut(other[i : i+3]); ok {
		t.Error("a copy's bytes were cut from the body")
	}
	if _, ok := text.cut(body[i:i]); ok {
		t.Error("an empty slice was cut")
	}
	roomy := append(make([]byte, 0, len(body)+8), body...)
	if _, ok := newBodyText(roomy).cut(roomy[len(roomy)-1 : len(roomy)+1]); ok {
		t.Error("bytes past the body's end were cut")
	}
	if _, ok := newBodyText(nil).cut(body[i : i+3]); ok {
		t.Error("an empty body cut something")
	}
}

// processCPU is the CPU time the process has used, user and system, in
// nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
