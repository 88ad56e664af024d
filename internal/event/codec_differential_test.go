package event

// The codec's differential suite: every reader and writer of an event's
// JSON is held to encoding/json's answers, on samples, on random edits of
// them and by fuzzing (go test -fuzz FuzzCodec, FuzzUnquote, FuzzCheckJSON;
// the corpus is testdata/fuzz):
//   - Decode's fast path reads what it accepts exactly as encoding/json
//     does (fastAgrees), and Decode as a whole agrees with decodeStd,
//     errors included;
//   - Encode and AppendRecord write exactly json.Marshal's bytes without
//     HTML escaping, and what Decode accepts re-encodes to itself;
//   - Unquote decodes a string as json.Unmarshal does, and AppendJSONString
//     writes one as json.Marshal does;
//   - CheckJSON accepts exactly what a check on encoding/json's tokens does.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// fastAgrees fails t unless Decode's two paths agree on b: whatever
// decodeFast reads and passes the checks, encoding/json reads the same.
func fastAgrees(t *testing.T, b []byte) (fast bool) {
	t.Helper()
	slow, slowErr := decodeStd(b, sampleNow)
	e, plain, ok := decodeFast(b, false)
	// Sharing the record's memory reads the same.
	shared, sharedPlain, sharedOK := decodeFast(b, true)
	if ok != sharedOK || ok && (!reflect.DeepEqual(e, shared) || plain != sharedPlain) {
		t.Fatalf("decodeFast shared and copying disagree on %q:\n%#v\n%#v", b, e, shared)
	}
	if !ok {
		return false
	}
	// What plain lets the checks skip changes none of their answers.
	full := e
	fullErr, plainErr := full.check(sampleNow, false), e.check(sampleNow, plain)
	if fmt.Sprint(fullErr) != fmt.Sprint(plainErr) || !reflect.DeepEqual(full, e) {
		t.Fatalf("the checks of %q answer %v in full and %v with plain=%v", b, fullErr, plainErr, plain)
	}
	if plainErr != nil {
		return false
	}
	if slowErr != nil {
		t.Fatalf("decodeFast read %q, the library refuses it: %v", b, slowErr)
	}
	if !reflect.DeepEqual(e, slow) {
		t.Fatalf("decodeFast and the library disagree on %q:\n%#v\n%#v", b, e, slow)
	}
	return true
}

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

// TestDecodeIsStd: Decode reads every sample exactly as encoding/json does,
// errors included: raw invalid UTF-8 in a string and in metadata, nesting
// deeper than encoding/json's limit of 10000, numbers no float holds.
func TestDecodeIsStd(t *testing.T) {
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
	for i, s := range samples {
		agreesWithStd(t, []byte(s))
		if i < 2 {
			if _, err := DecodeAt([]byte(s), sampleNow); err != nil {
				t.Errorf("sample %d: %v", i, err)
			}
		}
	}
}

// agreesWithStd fails t unless Decode and decodeStd agree on b, and
// whatever Decode accepts Encode writes as encoding/json does and decodes
// back to itself.
func agreesWithStd(t *testing.T, b []byte) {
	t.Helper()
	want, wantErr := decodeStd(b, sampleNow)
	got, err := DecodeAt(b, sampleNow)
	if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode disagrees with encoding/json on %q:\n got %+v, %v\nwant %+v, %v", b, got, err, want, wantErr)
	}
	if err != nil {
		if !IsUndecodable(err) {
			t.Fatalf("Decode error %v is not one of the classes", err)
		}
		return
	}
	out, err := Encode(got)
	if err != nil {
		t.Fatalf("accepted envelope does not encode: %v", err)
	}
	if std := encodeStd(got); !bytes.Equal(out, std) {
		t.Fatalf("Encode wrote\n%s\nencoding/json writes\n%s", out, std)
	}
	again, err := DecodeAt(out, sampleNow)
	if err != nil {
		t.Fatalf("re-encoded envelope does not decode: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(got, again) {
		t.Fatalf("round trip changed the envelope:\n%#v\n%#v", got, again)
	}
}

func TestDecodeFastAgreesWithTheLibrary(t *testing.T) {
	decided := func(decision string) string {
		return sampleUndecided[:len(sampleUndecided)-1] + `,"decision":` + decision + "}"
	}
	for _, in := range []string{
		sampleUndecided,
		sampleTransaction,
		sampleAccountEvent,
		decided(`{"outcome":"decline","score":-0.5e1,"reasons":[],"rule_ids":["0193f5a2-7c00-7abc-8def-0123456789ab", "0193f5a2-7c00-7abc-8def-0123456789ac"],"latency_ms":12,"degraded":true}`),
		decided(`{ "outcome" : "approve" , "score" : 0 , "degraded" : false , "latency_ms" : -0 }`),
		" \n" + sampleUndecided + "\t ",
		strings.ReplaceAll(sampleUndecided, `":`, `" : `),
		strings.ReplaceAll(sampleUndecided, `,"`, ` ,  "`),
		`{"v":1,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"t","occurred_at":"2026-11-30T07:41:12Z","account_external_id":"a","amount":"1","currency":"EUR","direction":"in","counterparty":{}}`,
		`{"v":1,"kind":"transaction","id":"0193F5A2-7C00-7ABC-8DEF-0123456789AB","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"t","occurred_at":"2026-11-30T08:41:12+01:00","account_external_id":"a","amount":"1","currency":"EUR","direction":"in","metadata":{ "a" : [1, 2.5e3, "x\"y"], "b": {"c": null} }}`,
	} {
		if !fastAgrees(t, []byte(in)) {
			t.Errorf("decodeFast did not read %q", in)
		}
	}
	// Records decodeFast leaves to the library, each for one reason.
	for _, in := range []string{
		decided(`{"outcome":"approve","score":1,"latency_ms":1.0}`),               // not an integer
		decided(`{"outcome":"approve","score":01}`),                               // not a JSON number
		decided(`{"outcome":"approve","score":1e999}`),                            // beyond float64
		decided(`{"outcome":"approve","score":1,"degraded":null}`),                // a null
		decided(`{"outcome":"approve","score":1,"reasons":["a",]}`),               // a trailing comma
		strings.Replace(sampleUndecided, `"kind"`, `"Kind"`, 1),                   // a key in another case
		strings.Replace(sampleUndecided, `"v":1`, `"v":1,"v":1`, 1),               // a repeated key
		strings.Replace(sampleUndecided, `"v":1`, `"v":1.0`, 1),                   // not the integer 1
		strings.Replace(sampleUndecided, `"v":1`, `"v":1,"extra":"x"`, 1),         // an unknown key
		strings.Replace(sampleUndecided, `"mobile"`, `"mob\u0069le"`, 1),          // an escape
		strings.Replace(sampleUndecided, `"mobile"`, `null`, 1),                   // a null
		strings.Replace(sampleUndecided, `"mobile"`, "\"mob\xffile\"", 1),         // invalid UTF-8
		strings.Replace(sampleUndecided, `"mobile"`, "\"mob\tile\"", 1),           // a control character
		strings.Replace(sampleUndecided, `"name":`, `"name":"a","name":`, 1),      // a repeated nested key
		strings.Replace(sampleUndecided, `"metadata":{`, `"metadata":{"x":1,`, 1), // fine, but…
		sampleUndecided + "x",                                                                       // bytes after the object
		sampleUndecided[:len(sampleUndecided)-1] + ",}",                                             // a trailing comma
		strings.Replace(sampleUndecided, `"metadata":{`, `"metadata":[{`, 1),                        // not an object
		strings.Replace(sampleUndecided, `"tags":["rent","standing-order"]`, `"tags":["rent",]`, 1), // invalid metadata
		strings.Replace(sampleUndecided, `"occurred_at":"2026-11-30T07:41:12.345Z"`, `"occurred_at":"2026-11-30 07:41:12Z"`, 1),
		strings.Replace(sampleUndecided, `"amount":"1249.90"`, `"amount":1249.90`, 1),
		"", "{", "{}", `{"v":1}`, "[]", "null",
		// A DEL (not plain, so CheckText looks at every text field:
		// refused), a DEL in metadata (CheckJSONB's), a label beyond ASCII
		// (plain: fine) and one past its limit only in bytes.
		strings.Replace(sampleUndecided, `"mobile"`, "\"mob\x7file\"", 1),
		strings.Replace(sampleUndecided, `"tags"`, "\"t\x7fags\"", 1),
		strings.Replace(sampleUndecided, `"mobile"`, `"möbile"`, 1),
		strings.Replace(sampleUndecided, `"mobile"`, `"`+strings.Repeat("ö", MaxLabelBytes/2+1)+`"`, 1),
		// Plain, one byte past a limit.
		strings.Replace(sampleUndecided, `"mobile"`, `"`+strings.Repeat("m", MaxLabelBytes+1)+`"`, 1),
	} {
		fastAgrees(t, []byte(in))
	}
	// The one with a number inside metadata is still read fast.
	if !fastAgrees(t, []byte(strings.Replace(sampleUndecided, `"metadata":{`, `"metadata":{"x":1,`, 1))) {
		t.Error("decodeFast did not read metadata holding a number")
	}
}

// Random edits of the samples (bytes changed, removed, inserted, JSON's
// punctuation first): wherever decodeFast reads one, encoding/json agrees,
// and Decode as a whole agrees with it on every one.
func TestDecodeFastAgreesOnEditedRecords(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	seeds := []string{sampleUndecided, sampleAccountEvent, sampleTransaction}
	fast := 0
	for i := 0; i < 30000; i++ {
		b := []byte(seeds[r.IntN(len(seeds))])
		for k := r.IntN(3) + 1; k > 0; k-- {
			switch r.IntN(4) {
			case 0:
				b[r.IntN(len(b))] = byte(r.IntN(256))
			case 1:
				sp := "{}[]\",:\\ 01-.eE"
				b[r.IntN(len(b))] = sp[r.IntN(len(sp))]
			case 2:
				j := r.IntN(len(b))
				b = append(b[:j], b[j+1:]...)
			case 3:
				j := r.IntN(len(b))
				sp := "{}[]\",:\\ 01"
				b = append(b[:j], append([]byte{sp[r.IntN(len(sp))]}, b[j:]...)...)
			}
		}
		if fastAgrees(t, b) {
			fast++
		}
		agreesWithStd(t, b)
	}
	if fast == 0 {
		t.Error("decodeFast read none of the edited records")
	}
}

// FuzzCodec: on any input Decode never panics, agrees with encoding/json
// (values and errors alike), its fast path with encoding/json wherever it
// reads, and what it accepts encodes to encoding/json's bytes and decodes
// back to itself.
func FuzzCodec(f *testing.F) {
	for _, s := range []string{
		sampleTransaction, sampleAccountEvent, sampleUndecided, "", "null", "{}", `{"v":1}`, `{"v":2}`,
		`{"v":1,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"t<&>\u2028","occurred_at":"2026-01-01T00:00:00+14:00","account_external_id":"a","amount":"-0.0","currency":"ABC","direction":"in","metadata":{"<":"\u2028","n":[1.50,{"x":null}]},"decision":{"outcome":"approve","score":-0,"reasons":[]},"counterparty":{"name":"Müller & Söhne <GmbH>"}}`,
		strings.Replace(sampleUndecided, `"mobile"`, `"mob\ud83d\ude00\u00e9\"\\\/\b\f\n\r\t\ud800x"`, 1),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fastAgrees(t, b)
		agreesWithStd(t, b)
	})
}

// FuzzUnquote: Unquote decodes a JSON string as json.Unmarshal does, and
// AppendJSONString writes any string as json.Marshal does.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`""`, `"a"`, `"\u00e9\ud83d\ude00"`, `"\ud800"`, `"\ud800\u0041"`, `"\udc00\ud800"`, "\"\xff\"", `"\x"`, `"a\"`, `"<&>\u2028"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Unquote takes the token; json.Unmarshal the space around it too.
		got, ok := Unquote(bytes.Trim(b, " \t\r\n"))
		var want string
		stdErr := json.Unmarshal(b, &want)
		if stdErr == nil && (!ok || got != want) {
			t.Fatalf("Unquote(%q) = %q, %v; json.Unmarshal %q", b, got, ok, want)
		}
		if ok && stdErr != nil && CheckJSON(b) == nil {
			t.Fatalf("Unquote(%q) = %q, json.Unmarshal refuses it: %v", b, got, stdErr)
		}
		for _, html := range []bool{false, true} {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(html)
			_ = enc.Encode(string(b))
			if w := bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}); !bytes.Equal(AppendJSONString(nil, string(b), html), w) {
				t.Fatalf("AppendJSONString(%q, %v) = %s, encoding/json %s", b, html, AppendJSONString(nil, string(b), html), w)
			}
		}
	})
}

// TestAppendFloatIsMarshal: a decision's score is written as json.Marshal
// writes a float64, on both sides of the exponent form's bounds.
func TestAppendFloatIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	samples := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-6, 9.99999e-7, 1e-7, 1e20, 1e21, 123456789e13, 1e-300, 5e-324, math.MaxFloat64, -12.345}
	for range 20000 {
		samples = append(samples, math.Float64frombits(r.Uint64()), r.NormFloat64()*math.Pow(10, float64(r.IntN(60)-30)))
	}
	for _, f := range samples {
		want, err := json.Marshal(f)
		if err != nil {
			continue // NaN and the infinities: normalize refuses them
		}
		if got := appendFloat(nil, f); !bytes.Equal(got, want) {
			t.Fatalf("appendFloat(%v) = %s, json.Marshal %s", f, got, want)
		}
	}
}

// checkJSONTokens is CheckJSON written plainly, on encoding/json tokens:
// the reference the byte scanner is fuzzed against. Its syntax faults say
// only "invalid JSON" (encoding/json counts offsets its own way), and it
// finds UTF-8 and escape faults by a pass before the walk, without a path.
func checkJSONTokens(raw []byte) error {
	if !utf8.Valid(raw) {
		return &JSONFault{Reason: ReasonNotUTF8}
	}
	if err := checkEscapes(raw); err != nil {
		return &JSONFault{Reason: err.Error()}
	}
	invalid := &JSONFault{Reason: "invalid JSON", Syntax: true}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		obj     bool
		wantKey bool
		keys    map[string]struct{}
		key     string
		n       int
	}
	var stack []frame
	path := func(depth int) string {
		var b []byte
		for _, f := range stack[:depth] {
			if len(b) > maxPathBytes {
				return string(append(b, "…"...))
			}
			if !f.obj {
				b = append(b, fmt.Sprintf("[%d]", f.n)...)
				continue
			}
			if len(b) > 0 {
				b = append(b, '.')
			}
			b = AppendPathKey(b, []byte(f.key))
		}
		return string(b)
	}
	values := 0 // top-level values begun
	valueDone := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].obj {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].n++
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) > 0 || values != 1 {
				return invalid
			}
			break
		}
		if err != nil {
			return invalid
		}
		if len(stack) == 0 {
			if values++; values > 1 {
				return &JSONFault{Reason: ReasonDataAfter, Syntax: true}
			}
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			k, _ := tok.(string)
			top := &stack[n-1]
			top.key = k
			if _, dup := top.keys[k]; dup {
				return &JSONFault{Path: path(n), Reason: ReasonDuplicateKey}
			}
			top.keys[k] = struct{}{}
			top.wantKey = false
			continue
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= MaxJSONDepth {
					return &JSONFault{Reason: ReasonTooDeep}
				}
				stack = append(stack, frame{obj: t == '{', wantKey: t == '{', keys: map[string]struct{}{}})
			case ']':
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case json.Number:
			if err := checkNumber(string(t)); err != nil {
				return &JSONFault{Path: path(len(stack)), Reason: err.Error()}
			}
			valueDone()
		default:
			valueDone()
		}
	}
	return nil
}

// FuzzCheckJSON: the byte scanner accepts exactly what the token-based
// check accepted, and refuses with the same message.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1}`, `{"a":"x\u00e9"}`, `{"a":[1,2,{"b":null}],"c":true}`, `{"n":1e999999}`, `{"a":1,"\u0061":2}`,
		`{"a":{"b":1,"b":2}}`, `[1,[2,[3]]]`, `{} {}`, `{}x`, `-0.5e+3`, `01`, `1.`, `"\x"`, `{"a" 1}`, `[1,]`, `{"a":1,}`,
		` {"items":[{"k":"v","n":{"m":[true,false,null]}}]} `, "\"a\tb\"", "\"a\x01b\"", `{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k3":3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := CheckJSON(b), checkJSONTokens(b)
		if (got == nil) != (want == nil) {
			t.Fatalf("CheckJSON(%q) = %v, the token check %v", b, got, want)
		}
		if got == nil {
			return
		}
		var g, w *JSONFault
		if !errors.As(got, &g) || !errors.As(want, &w) {
			t.Fatalf("CheckJSON(%q) = %v (%T), want a *JSONFault", b, got, got)
		}
		switch {
		case w.Syntax:
			// Where encoding/json and the scanner stop differs; that it
			// is a syntax fault does not.
			if !g.Syntax {
				t.Fatalf("CheckJSON(%q) = %v, the token check a syntax fault %v", b, got, want)
			}
		case w.Reason == ReasonNotUTF8 || w.Reason == ReasonNUL || w.Reason == ReasonSurrogate:
			// The scanner locates these in document order, so a rule
			// broken earlier may be named instead.
		case *g != *w:
			t.Fatalf("CheckJSON(%q) = %#v, the token check %#v", b, *g, *w)
		}
	})
}
