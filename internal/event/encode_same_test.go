package event

import (
	"bytes"
	"encoding/json"
	"testing"
)

// encodeStd is Encode written plainly, with encoding/json: the reference
// the faster encoder must match byte for byte.
func encodeStd(e Envelope) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&e); err != nil {
		return nil
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
}

// FuzzEncodeSameBytes: whatever Decode accepts, Encode writes exactly the
// bytes encoding/json would.
func FuzzEncodeSameBytes(f *testing.F) {
	for _, s := range []string{
		sampleTransaction, sampleAccountEvent,
		`{"v":1,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"t<&>\u2028","occurred_at":"2026-01-01T00:00:00+14:00","account_external_id":"a","amount":"-0.0","currency":"ABC","direction":"in","metadata":{"<":"\u2028","n":[1.50,{"x":null}]},"decision":{"outcome":"approve","score":-0,"reasons":[]},"counterparty":{"name":"Müller & Söhne <GmbH>"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeAt(b, sampleNow)
		if err != nil {
			return
		}
		got, err := Encode(e)
		if err != nil {
			return
		}
		e.V = Version
		if err := e.normalize(false); err != nil {
			return
		}
		if want := encodeStd(e); !bytes.Equal(got, want) {
			t.Fatalf("Encode wrote\n%s\nencoding/json writes\n%s", got, want)
		}
	})
}
