// The JSON library comparison behind Decode's choice of goccy/go-json: it
// must read every record exactly as encoding/json does (TestJSONCandidatesAgree
// and the differential FuzzJSONCandidates) and be clearly faster
// (BenchmarkJSONDecode, run by make bench). Ruled out for correctness:
// bytedance/sonic (keeps invalid UTF-8), segmentio/encoding
// (accepts 20,000-deep nesting), json-iterator (keeps invalid UTF-8, refuses
// 1e999); they are not dependencies, so they are not benchmarked here.

package event

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	gojson "github.com/goccy/go-json"
)

type jsonCandidate struct {
	name      string
	unmarshal func([]byte, any) error
}

var jsonCandidates = []jsonCandidate{
	{"encoding_json", json.Unmarshal},
	{"goccy_go-json", gojson.Unmarshal},
}

// adoptedJSON is the candidate Decode uses; it must agree with
// encoding/json everywhere. The others' disagreements are logged as the
// findings that ruled them out.
const adoptedJSON = "goccy_go-json"

// TestJSONCandidatesAgree: a candidate is only adoptable if Decode built on
// it reads every sample exactly as encoding/json does, errors included.
func TestJSONCandidatesAgree(t *testing.T) {
	samples := []string{
		sampleTransaction, sampleAccountEvent, "", "not json", `{"v":2}`, `{"v":1}`,
		`{"v":1,"kind":"transaction","id":"x","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d"}`,
		`{"v":1,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","amount":12.5}`,
		`{"V":1,"KIND":"account_event","id":"0193f5a2-7c00-7abc-8def-0123456789ab","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"e","occurred_at":"2026-01-01T00:00:00Z","customer_external_id":"c","type":"sign_in"}`,
		`{"v":1,"kind":"account_event","id":"0193f5a2-7c00-7abc-8def-0123456789ab","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"e\ud800","occurred_at":"2026-01-01T00:00:00Z","customer_external_id":"c","type":"sign_in","attributes":{"a":[1,2,{"b":null}]}}`,
	}
	// Raw invalid UTF-8 in a string and in metadata, and nesting deeper than
	// encoding/json's limit of 10000 (a decoder that recurses without a limit
	// overflows the goroutine stack, which is fatal, not a recoverable panic).
	withMeta := func(meta string) string {
		return sampleTransaction[:len(sampleTransaction)-1] + `,"metadata":` + meta + `}`
	}
	samples = append(samples,
		strings.Replace(sampleTransaction, "Müller", "M\xff\xfeller", 1),
		withMeta("{\"k\":\"\xff\"}"),
		withMeta(`{"k":`+strings.Repeat("[", 20000)+strings.Repeat("]", 20000)+`}`),
		withMeta(`{"k":1e999}`),
		withMeta(`{"k":-}`),
	)
	for _, c := range jsonCandidates[1:] {
		for i, s := range samples {
			want, wantErr := decodeWith([]byte(s), json.Unmarshal, sampleNow)
			got, err := decodeWith([]byte(s), c.unmarshal, sampleNow)
			if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
				report := t.Logf
				if c.name == adoptedJSON {
					report = t.Errorf
				}
				report("%s, sample %d: error %v, value equal %v; encoding/json: error %v", c.name, i, err, reflect.DeepEqual(got, want), wantErr)
			}
		}
	}
}

func BenchmarkJSONDecode(b *testing.B) {
	in := []byte(sampleTransaction)
	for _, c := range jsonCandidates {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeWith(in, c.unmarshal, sampleNow); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzJSONCandidates is a differential fuzz: Decode on each candidate must
// neither panic nor disagree with encoding/json, on any input. Robustness is
// half of the adoption rule, and a fast decoder that reads a record
// differently would store something other than what was sent.
func FuzzJSONCandidates(f *testing.F) {
	for _, s := range []string{sampleTransaction, sampleAccountEvent, `{"v":1}`, `{"v":2}`, "null"} {
		f.Add([]byte(s))
	}
	// JSONBENCH_CANDIDATE=name fuzzes another candidate; by default the
	// adopted one.
	only := os.Getenv("JSONBENCH_CANDIDATE")
	if only == "" {
		only = adoptedJSON
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantErr := decodeWith(b, json.Unmarshal, sampleNow)
		for _, c := range jsonCandidates[1:] {
			if c.name != only {
				continue
			}
			got, err := decodeWith(b, c.unmarshal, sampleNow)
			if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
				t.Errorf("%s disagrees with encoding/json on %q:\n got %+v, %v\nwant %+v, %v", c.name, b, got, err, want, wantErr)
			}
		}
	})
}
