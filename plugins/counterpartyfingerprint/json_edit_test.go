package counterpartyfingerprint

import (
	"bytes"
	"strings"
	"testing"
)

// TestEditsOnlyWhatItProtects: the objects the processor does not edit
// keep their bytes (spacing, escapes, number spelling), a message with
// nothing to protect passes byte for byte, and every copy of an identifier
// named twice is removed.
func TestEditsOnlyWhatItProtects(t *testing.T) {
	p := newTestProcessor(t, testKey1)
	const metadata = `{ "ip" : "203.0.113.7", "n": 1.50e+2, "s": "\u00e9<&>" }`
	const untouched = `"metadata": ` + metadata
	outs, errs := run(t, p,
		`{"amount":"1.00", `+untouched+`, "counterparty":{"identifier":"DE89370400440532013000","identifier":"DE89 3704 0044 0532 0130 00"}}`,
		`{"amount":"1.00", `+untouched+` }`)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors %v, %v", errs[0], errs[1])
	}
	if !bytes.Contains(outs[0], []byte(metadata)) {
		t.Errorf("an object the processor did not edit changed: %s", outs[0])
	}
	if strings.Count(string(outs[0]), `"identifier"`) != 0 || strings.Count(string(outs[0]), `"identifier_enc"`) != 1 {
		t.Errorf("an identifier named twice: %s", outs[0])
	}
	if want := withWorkspace(`{"amount":"1.00", ` + untouched + ` }`); string(outs[1]) != want {
		t.Errorf("a message with nothing to protect changed:\n%s\nwant\n%s", outs[1], want)
	}
}
