package counterpartyfingerprint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

const (
	testKey1 = "k1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	testKey2 = "k2:1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100"
	testFP   = "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
)

func newTestProcessor(t testing.TB, encKey string) *counterpartyFingerprint {
	t.Helper()
	conf, err := counterpartyFingerprintSpec().ParseYAML(fmt.Sprintf("encryption_key: %q\nfingerprint_key: %q\n", encKey, testFP), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newCounterpartyFingerprintFromParsed(conf)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run processes one batch and returns each message's bytes and error.
func run(t testing.TB, p *counterpartyFingerprint, inputs ...string) ([][]byte, []error) {
	t.Helper()
	batch := make(service.MessageBatch, len(inputs))
	for i, in := range inputs {
		batch[i] = service.NewMessage([]byte(withWorkspace(in)))
	}
	out, err := p.ProcessBatch(context.Background(), batch)
	if err != nil {
		t.Fatalf("ProcessBatch: %v", err)
	}
	if len(out) != 1 || len(out[0]) != len(inputs) {
		t.Fatalf("ProcessBatch returned %d batches, want 1 of %d", len(out), len(inputs))
	}
	var bs [][]byte
	var errs []error
	for _, m := range out[0] {
		b, err := m.AsBytes()
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
		errs = append(errs, m.GetError())
	}
	return bs, errs
}

// testWS is the workspace withWorkspace gives an input that names none.
const testWS = "6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d"

// withWorkspace adds workspace_id to a JSON object input that has none:
// identifiers are protected for the message's workspace.
func withWorkspace(in string) string {
	if strings.HasPrefix(in, "{") && !strings.Contains(in, `"workspace_id"`) {
		if in == "{}" {
			return `{"workspace_id":"` + testWS + `"}`
		}
		return `{"workspace_id":"` + testWS + `",` + in[1:]
	}
	return in
}

func mustWS(t testing.TB) event.UUID {
	t.Helper()
	ws, err := event.ParseUUID(testWS)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func decodeJSON(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	return m
}

func TestCounterpartyFingerprint(t *testing.T) {
	p := newTestProcessor(t, testKey1)
	tests := []struct {
		name       string
		in         string
		wantErr    string            // substring; "" means success
		wantFields map[string]string // path → value, "*" = any non-empty
		absent     []string          // paths that must not exist
	}{
		{
			name: "counterparty iban",
			in:   `{"external_id":"t1","amount":"10.00","counterparty":{"name":"ACME Ltd","identifier":"de89 3704 0044 0532 0130 00","identifier_kind":"IBAN"}}`,
			wantFields: map[string]string{
				"counterparty.identifier_kind":   "iban",
				"counterparty.identifier_masked": "DE89 **** **** **** 3000",
				"counterparty.identifier_enc":    "*",
				"counterparty.identifier_fp":     "*",
				"counterparty.fingerprint":       "*",
				"counterparty.name":              "ACME Ltd",
				"amount":                         "10.00",
			},
			absent: []string{"counterparty.identifier"},
		},
		{
			name: "kind inferred: iban",
			in:   `{"counterparty":{"identifier":"GB82 WEST 1234 5698 7654 32"}}`,
			wantFields: map[string]string{
				"counterparty.identifier_kind":   "iban",
				"counterparty.identifier_masked": "GB82 **** **** **** 5432",
			},
			absent: []string{"counterparty.identifier"},
		},
		{
			name: "kind inferred: phone",
			in:   `{"counterparty":{"identifier":"+49 171 1234567"}}`,
			wantFields: map[string]string{
				"counterparty.identifier_kind":   "phone",
				"counterparty.identifier_masked": "+49 ******* 567",
			},
			absent: []string{"counterparty.identifier"},
		},
		{
			name: "account item",
			in:   `{"external_id":"acc-1","account_number":"0532-0130-00","account_number_kind":"account_number"}`,
			wantFields: map[string]string{
				"account_number_kind":   "account_number",
				"account_number_masked": "****3000",
				"account_number_enc":    "*",
				"account_number_fp":     "*",
			},
			absent: []string{"account_number", "counterparty"},
		},
		{
			name:       "name-only counterparty",
			in:         `{"counterparty":{"name":"Corner Shop"}}`,
			wantFields: map[string]string{"counterparty.fingerprint": "*"},
			absent:     []string{"counterparty.identifier_fp"},
		},
		{
			name:   "no identifiers at all",
			in:     `{"external_id":"t2","metadata":{"a":1}}`,
			absent: []string{"counterparty", "account_number_fp"},
		},
		{
			name:   "null and empty identifiers",
			in:     `{"account_number":null,"counterparty":{"identifier":"","name":""}}`,
			absent: []string{"account_number", "counterparty.identifier", "counterparty.identifier_fp", "counterparty.fingerprint"},
		},
		{
			name:    "bad iban checksum",
			in:      `{"counterparty":{"name":"X","identifier":"DE89 3704 0044 0532 0130 01","identifier_kind":"iban"}}`,
			wantErr: "counterparty.identifier: invalid identifier: iban checksum does not match",
			absent:  []string{"counterparty.identifier", "counterparty.identifier_enc"},
		},
		{
			name:    "national phone number",
			in:      `{"counterparty":{"identifier":"0171 1234567","identifier_kind":"phone"}}`,
			wantErr: "counterparty.identifier: invalid identifier: phone has no international prefix",
			absent:  []string{"counterparty.identifier"},
		},
		{
			name:    "unknown kind",
			in:      `{"counterparty":{"identifier":"4111111111111111","identifier_kind":"card"}}`,
			wantErr: "counterparty.identifier_kind: unknown identifier kind",
			absent:  []string{"counterparty.identifier"},
		},
		{
			name:    "number instead of string",
			in:      `{"account_number":12345678}`,
			wantErr: "account_number: want a string, got a JSON number",
			absent:  []string{"account_number"},
		},
		{
			name:    "one bad, one good: both scrubbed",
			in:      `{"account_number":"DE89370400440532013000","account_number_kind":"iban","counterparty":{"identifier":"DE00370400440532013000","identifier_kind":"iban"}}`,
			wantErr: "counterparty.identifier: invalid identifier: iban checksum",
			absent:  []string{"account_number", "counterparty.identifier"},
		},
		{
			name:    "not JSON",
			in:      `account_number=DE89370400440532013000`,
			wantErr: "message is not JSON, content dropped",
		},
		{
			name:    "JSON array",
			in:      `["DE89370400440532013000"]`,
			wantErr: "not a JSON object",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outs, errs := run(t, p, tt.in)
			out, err := outs[0], errs[0]
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
			}
			assertNoClearIdentifier(t, tt.in, out, err)
			if len(out) == 0 || out[0] != '{' {
				return
			}
			m := decodeJSON(t, out)
			for path, want := range tt.wantFields {
				got, ok := lookup(m, path)
				s, _ := got.(string)
				if !ok || (want == "*" && s == "") || (want != "*" && s != want) {
					t.Errorf("%s = %v (present %v), want %q", path, got, ok, want)
				}
			}
			for _, path := range tt.absent {
				if got, ok := lookup(m, path); ok {
					t.Errorf("%s = %v, want absent", path, got)
				}
			}
		})
	}
}

// assertNoClearIdentifier checks that no identifier-looking run of the
// input (6+ letters/digits of a clear value, in raw or normalised form)
// appears in the output bytes or the error.
func assertNoClearIdentifier(t *testing.T, in string, out []byte, err error) {
	t.Helper()
	var m map[string]any
	_ = json.Unmarshal([]byte(in), &m)
	var clear []string
	if cp, ok := m["counterparty"].(map[string]any); ok {
		if s, ok := cp["identifier"].(string); ok {
			clear = append(clear, s)
		}
	}
	if s, ok := m["account_number"].(string); ok {
		clear = append(clear, s)
	}
	if m == nil && strings.Contains(in, "DE89") {
		clear = append(clear, "DE89370400440532013000")
	}
	for _, c := range clear {
		norm := strings.ToUpper(strings.NewReplacer(" ", "", "-", "", "+", "").Replace(c))
		if len(norm) < 6 {
			continue
		}
		tail := norm[len(norm)-6:] // masks show at most 4 characters
		for _, hay := range []string{string(out), strings.ToUpper(string(out)), fmt.Sprint(err)} {
			if strings.Contains(hay, c) || strings.Contains(strings.ToUpper(hay), norm) || strings.Contains(strings.ToUpper(hay), tail) {
				t.Errorf("clear identifier leaks: %q found in %q", tail, hay)
			}
		}
	}
}

func lookup(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, seg := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[seg]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func TestBatchProceedsPastFailures(t *testing.T) {
	p := newTestProcessor(t, testKey1)
	outs, errs := run(t, p,
		`{"counterparty":{"identifier":"DE89370400440532013000","identifier_kind":"iban"}}`,
		`{"counterparty":{"identifier":"DE89370400440532013001","identifier_kind":"iban"}}`,
		`{"account_number":"12345678"}`,
	)
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("good messages failed: %v, %v", errs[0], errs[2])
	}
	if errs[1] == nil {
		t.Error("message with a bad IBAN checksum did not fail")
	}
	for i, out := range outs {
		if bytes.Contains(out, []byte("0532013")) {
			t.Errorf("message %d leaks the clear identifier: %s", i, out)
		}
	}
}

func TestAccountAndCounterpartyShareIdentifierFP(t *testing.T) {
	p := newTestProcessor(t, testKey1)
	tests := []struct{ account, counterparty string }{
		// Same IBAN, spelled differently by two systems.
		{`{"account_number":"DE89370400440532013000","account_number_kind":"iban"}`,
			`{"counterparty":{"identifier":"de89 3704 0044 0532 0130 00","identifier_kind":"iban"}}`},
		// Same IBAN, kind inferred on both sides.
		{`{"account_number":"GB82WEST12345698765432"}`,
			`{"counterparty":{"identifier":"GB82 WEST 1234 5698 7654 32"}}`},
		// Same domestic account number.
		{`{"account_number":"0532013000","account_number_kind":"account_number"}`,
			`{"counterparty":{"identifier":"0532-0130-00","identifier_kind":"account_number"}}`},
		// Same phone number (wallets).
		{`{"account_number":"+491711234567","account_number_kind":"phone"}`,
			`{"counterparty":{"identifier":"0049 (171) 123-4567","identifier_kind":"phone"}}`},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		outs, errs := run(t, p, tt.account, tt.counterparty)
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("errors: %v, %v", errs[0], errs[1])
		}
		acct, _ := lookup(decodeJSON(t, outs[0]), "account_number_fp")
		cp, _ := lookup(decodeJSON(t, outs[1]), "counterparty.identifier_fp")
		if acct == nil || acct != cp {
			t.Errorf("account_number_fp %v != counterparty.identifier_fp %v for %s", acct, cp, tt.account)
		}
		if seen[fmt.Sprint(acct)] {
			t.Errorf("different identifiers share fingerprint %v", acct)
		}
		seen[fmt.Sprint(acct)] = true
	}
}

func TestKeyRotation(t *testing.T) {
	const in = `{"counterparty":{"name":"ACME","identifier":"DE89370400440532013000","identifier_kind":"iban"}}`
	old := newTestProcessor(t, testKey1)
	outs, _ := run(t, old, in)
	oldOut := decodeJSON(t, outs[0])

	// k2 becomes current; k1 stays listed for what it wrote.
	rotated := newTestProcessor(t, testKey2+","+testKey1)
	outs, _ = run(t, rotated, in)
	newOut := decodeJSON(t, outs[0])

	ring, err := identity.ParseKeyring(testKey2 + "," + testKey1)
	if err != nil {
		t.Fatal(err)
	}
	oldEnc, _ := lookup(oldOut, "counterparty.identifier_enc")
	newEnc, _ := lookup(newOut, "counterparty.identifier_enc")
	if !strings.HasPrefix(oldEnc.(string), "k1:") || !strings.HasPrefix(newEnc.(string), "k2:") {
		t.Fatalf("key ids: old %.3s, new %.3s; want k1, k2", oldEnc, newEnc)
	}
	for _, enc := range []string{oldEnc.(string), newEnc.(string)} {
		if got, err := ring.Decrypt(mustWS(t), identity.FieldCounterpartyIdentifier, enc); err != nil || got != "DE89370400440532013000" {
			t.Errorf("Decrypt(%.3s…) = %q, %v", enc, got, err)
		}
	}
	// Fingerprints do not depend on the encryption key, so links survive rotation.
	for _, path := range []string{"counterparty.identifier_fp", "counterparty.fingerprint"} {
		a, _ := lookup(oldOut, path)
		b, _ := lookup(newOut, path)
		if a != b {
			t.Errorf("%s changed with key rotation", path)
		}
	}
}

func TestIdempotent(t *testing.T) {
	p := newTestProcessor(t, testKey1)
	outs, _ := run(t, p, `{"counterparty":{"name":"ACME","identifier":"DE89370400440532013000"}}`)
	again, errs := run(t, p, string(outs[0]))
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if !bytes.Equal(outs[0], again[0]) {
		t.Errorf("second pass changed the message:\n%s\n%s", outs[0], again[0])
	}
}

func TestMissingKeysRefuseToStart(t *testing.T) {
	// The keys come from the config only; the environment is never read,
	// so keys set there do not make a config without them work.
	t.Setenv("SP_ENCRYPTION_KEY", testKey1)
	t.Setenv("SP_FINGERPRINT_KEY", testFP)
	for _, yaml := range []string{``, `fingerprint_key: "` + testFP + `"`, `encryption_key: "` + testKey1 + `"`} {
		conf, err := counterpartyFingerprintSpec().ParseYAML(yaml, nil)
		if err == nil {
			_, err = newCounterpartyFingerprintFromParsed(conf)
		}
		if err == nil {
			t.Errorf("config %q without both keys built a processor", yaml)
		}
	}
	for yaml, want := range map[string]error{
		`encryption_key: ""` + "\n" + `fingerprint_key: "` + testFP + `"`:       identity.ErrMissingKey,
		`encryption_key: "k1:00"` + "\n" + `fingerprint_key: "` + testFP + `"`:  identity.ErrInvalidKey,
		`encryption_key: "` + testKey1 + `"` + "\n" + `fingerprint_key: "abcd"`: identity.ErrInvalidKey,
	} {
		conf, err := counterpartyFingerprintSpec().ParseYAML(yaml, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = newCounterpartyFingerprintFromParsed(conf)
		if !errors.Is(err, want) {
			t.Errorf("config %q: error %v, want %v", yaml, err, want)
		}
	}
}

// TestInPipeline runs the processor as a user configures it, by name in
// YAML, and checks what reaches the output.
func TestInPipeline(t *testing.T) {
	t.Setenv("SP_ENCRYPTION_KEY", testKey1)
	t.Setenv("SP_FINGERPRINT_KEY", testFP)
	b := service.NewStreamBuilder()
	produce, err := b.AddBatchProducerFunc()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddProcessorYAML(`counterparty_fingerprint:
  encryption_key: ${SP_ENCRYPTION_KEY}
  fingerprint_key: ${SP_FINGERPRINT_KEY}`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	var failed int
	if err := b.AddBatchConsumerFunc(func(_ context.Context, batch service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range batch {
			bs, _ := m.AsBytes()
			got = append(got, string(bs))
			if m.GetError() != nil {
				failed++
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stream, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- stream.Run(ctx) }()
	if err := produce(ctx, service.MessageBatch{
		service.NewMessage([]byte(withWorkspace(`{"counterparty":{"identifier":"DE89370400440532013000","identifier_kind":"iban"}}`))),
		service.NewMessage([]byte(withWorkspace(`{"counterparty":{"identifier":"DE89370400440532013001","identifier_kind":"iban"}}`))),
	}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || failed != 1 {
		t.Fatalf("got %d messages, %d failed; want 2, 1", len(got), failed)
	}
	for _, s := range got {
		if strings.Contains(s, "0532013") {
			t.Errorf("clear identifier reached the output: %s", s)
		}
	}
}

func BenchmarkCounterpartyFingerprint(b *testing.B) {
	p := newTestProcessor(b, testKey1)
	const in = `{"v":1,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d",` +
		`"external_id":"txn-1","occurred_at":"2026-11-30T07:41:12.345Z","account_external_id":"acc-42","amount":"1249.90","currency":"EUR",` +
		`"direction":"out","counterparty":{"name":"Hausverwaltung Müller GmbH","identifier":"DE89 3704 0044 0532 0130 00","identifier_kind":"iban"},` +
		`"metadata":{"device_id":"a1b2c3d4","ip":"203.0.113.7"}}`
	const batchSize = 100
	inputs := make([][]byte, batchSize)
	for i := range inputs {
		inputs[i] = []byte(in)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(in)) * batchSize)
	for b.Loop() {
		batch := make(service.MessageBatch, batchSize)
		for i := range batch {
			batch[i] = service.NewMessage(inputs[i])
		}
		out, _ := p.ProcessBatch(context.Background(), batch)
		for _, m := range out[0] {
			if _, err := m.AsBytes(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchSize), "ns/msg")
}

// Identifiers are protected for the message's workspace: another workspace
// gets other fingerprints, and a message naming none fails with every clear
// identifier removed.
func TestProtectedPerWorkspace(t *testing.T) {
	p := newTestProcessor(t, testKey1)
	const body = `"counterparty":{"name":"ACME","identifier":"DE89370400440532013000","identifier_kind":"iban"}}`
	outs, errs := run(t, p,
		`{"workspace_id":"`+testWS+`",`+body,
		`{"workspace_id":"11111111-2222-4333-8444-555555555555",`+body,
		`{`+strings.Replace(body, `"counterparty"`, `"workspace_id":"nope","counterparty"`, 1))
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors %v, %v", errs[0], errs[1])
	}
	a, b := decodeJSON(t, outs[0]), decodeJSON(t, outs[1])
	for _, path := range []string{"counterparty.identifier_fp", "counterparty.fingerprint"} {
		x, _ := lookup(a, path)
		y, _ := lookup(b, path)
		if x == nil || x == y {
			t.Errorf("%s: %v in both workspaces, want two different fingerprints", path, x)
		}
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "workspace_id") {
		t.Errorf("message without a workspace: error %v, want one naming workspace_id", errs[2])
	}
	if strings.Contains(string(outs[2]), "0532013") {
		t.Errorf("clear identifier left in a failed message: %s", outs[2])
	}
}
