package event

import (
	"reflect"
	"testing"
)

// FuzzDecode: Decode never panics, every error is one of the four classes,
// and whatever it accepts re-encodes and decodes to the same envelope.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		sampleTransaction, sampleAccountEvent, "", "null", "{}", `{"v":1}`, `{"v":2}`,
		`{"v":1,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"t","occurred_at":"2026-01-01T00:00:00+14:00","account_external_id":"a","amount":"-0.0","currency":"ABC","direction":"in","metadata":{"<":"\u2028"},"decision":{"outcome":"approve","score":-0,"reasons":[]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeAt(b, sampleNow)
		if err != nil {
			if !IsUndecodable(err) {
				t.Fatalf("Decode error %v is not one of the four classes", err)
			}
			return
		}
		out, err := Encode(e)
		if err != nil {
			t.Fatalf("accepted envelope does not encode: %v", err)
		}
		e2, err := DecodeAt(out, sampleNow)
		if err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip changed the envelope:\n%#v\n%#v", e, e2)
		}
	})
}
