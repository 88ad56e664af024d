package event

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestJSONFaults: every fault is named once, by what is wrong and where
// (keys and array indices), counted from the value checked or, in a
// request body, from a field's value: a key named twice is not "invalid
// JSON", nor is nesting too deep.
func TestJSONFaults(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name    string
		raw     string
		framing int
		want    JSONFault
	}{
		{"duplicate at the top", `{"amount":"1.00","amount":"9.00"}`, 1, JSONFault{Path: "amount", Reason: ReasonDuplicateKey}},
		{"duplicate in an item", `{"items":[{"a":1},{"amount":"1","amount":"2"}]}`, 3, JSONFault{Path: "items[1].amount", Reason: ReasonDuplicateKey}},
		{"duplicate in nested metadata", `{"metadata":{"a":[0,{"b":1,"b":2}]}}`, 1, JSONFault{Path: "metadata.a[1].b", Reason: ReasonDuplicateKey}},
		{"duplicate escaped", `{"a":1,"\u0061":2}`, 0, JSONFault{Path: "a", Reason: ReasonDuplicateKey}},
		{"number too long", `{"m":{"n":[1e1001]}}`, 1, JSONFault{Path: "m.n[0]", Reason: "a number with more than 1000 digits before or after the point"}},
		{"exponent", `{"n":1e123456789}`, 0, JSONFault{Path: "n", Reason: "a number whose exponent is out of range"}},
		{"NUL located", `{"a":"x","b":["ok","\u0000"]}`, 0, JSONFault{Path: "b[1]", Reason: ReasonNUL}},
		{"NUL in a key", `{"a":{"\u0000":1}}`, 0, JSONFault{Path: "a", Reason: ReasonNUL}},
		{"surrogate", `{"s":"\ud800"}`, 0, JSONFault{Path: "s", Reason: ReasonSurrogate}},
		{"UTF-8 located", "{\"a\":\"ok\",\"r\":\"\xff\"}", 0, JSONFault{Path: "r", Reason: ReasonNotUTF8}},
		{"65 deep alone", `{"a":` + deep(64) + `}`, 0, JSONFault{Reason: ReasonTooDeep}},
		{"65 deep in a field", `{"items":[{"metadata":` + deep(65) + `}]}`, 3, JSONFault{Path: "items[0].metadata", Reason: ReasonTooDeep}},
		{"very deep is too deep, not invalid", `{"r":` + deep(20000) + `}`, 1, JSONFault{Path: "r", Reason: ReasonTooDeep}},
		{"empty", "  ", 1, JSONFault{Reason: ReasonEmpty, Syntax: true}},
		{"ends early", `{"items":[`, 3, JSONFault{Reason: ReasonEndsEarly, Syntax: true}},
		{"bad byte", `{"a" 1}`, 1, JSONFault{Reason: "invalid JSON at byte 5", Syntax: true}},
		{"data after", `{} {}`, 1, JSONFault{Reason: ReasonDataAfter, Syntax: true}},
		{"odd key quoted", `{"a b":{"c":1,"c":2}}`, 0, JSONFault{Path: `"a b".c`, Reason: ReasonDuplicateKey}},
		{"long path cut", `{"a":` + strings.Repeat(`{"abcdefghij":`, 20) + `[1e2000]` + strings.Repeat("}", 20) + `}`, 0, JSONFault{Path: "a.abcdefghij.abcdefghij…", Reason: "a number with more than 1000 digits before or after the point"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckJSONIn([]byte(tt.raw), tt.framing)
			var f *JSONFault
			if !errors.As(err, &f) || !errors.Is(err, ErrJSONB) {
				t.Fatalf("CheckJSONIn = %v, want a *JSONFault", err)
			}
			got := *f
			if len(tt.want.Path) > 0 && strings.HasSuffix(tt.want.Path, "…") {
				// A deep path is cut; its start and the cut are what matter.
				if !strings.HasPrefix(got.Path, strings.TrimSuffix(tt.want.Path, "…")) || !strings.HasSuffix(got.Path, "…") {
					t.Errorf("path = %q, want it to start %q and be cut", got.Path, tt.want.Path)
				}
				got.Path = tt.want.Path
			}
			if got != tt.want {
				t.Errorf("CheckJSONIn = %#v\nwant          %#v", got, tt.want)
			}
		})
	}
	// A field's value may nest MaxJSONDepth levels whatever wraps it.
	for framing, wrap := range map[int]string{0: "%s", 1: `{"m":%s}`, 3: `{"items":[{"m":%s}]}`} {
		body := strings.Replace(wrap, "%s", deep(MaxJSONDepth), 1)
		if framing == 0 {
			body = deep(MaxJSONDepth)
		}
		if err := CheckJSONIn([]byte(body), framing); err != nil {
			t.Errorf("framing %d, a value %d deep: %v", framing, MaxJSONDepth, err)
		}
	}
}

// TestDecodeYearOne: a time the record holds as year 1 (time.Time's zero)
// is refused for its year, not as "missing", and a time truly absent is
// still "missing".
func TestDecodeYearOne(t *testing.T) {
	set := func(old, new string) []byte {
		if !strings.Contains(sampleTransaction, old) {
			t.Fatalf("sample lacks %s", old)
		}
		return []byte(strings.Replace(sampleTransaction, old, new, 1))
	}
	at := `"occurred_at":"2026-11-30T07:41:12.345Z"`
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"occurred_at year 1", set(at, `"occurred_at":"0001-01-01T00:00:00Z"`), "occurred_at: year outside 1970..9999"},
		{"occurred_at year 1 with an offset", set(at, `"occurred_at":"0001-01-01T01:00:00+01:00"`), "occurred_at: year outside 1970..9999"},
		{"received_at year 1", set(`"received_at":"2026-11-30T07:41:12.402917Z"`, `"received_at":"0001-01-01T00:00:00Z"`), "received_at: year outside 1970..9999"},
		{"occurred_at absent", set(at+",", ""), "occurred_at: missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeAt(tt.in, sampleNow)
			if err == nil || !strings.HasSuffix(err.Error(), tt.want) || !IsUndecodable(err) {
				t.Fatalf("Decode = %v, want an undecodable error ending %q", err, tt.want)
			}
		})
	}
	if _, err := DecodeAt(set(at, `"occurred_at":"`+sampleNow.Add(-time.Hour).UTC().Format(time.RFC3339Nano)+`"`), sampleNow); err != nil {
		t.Errorf("a usual record: %v", err)
	}
}

// TestDecodeTooDeep: a record whose metadata nests deeper than the JSON
// libraries go (10,000 levels) is refused for its nesting, named at its
// field, not as invalid JSON; one just over MaxJSONDepth likewise.
func TestDecodeTooDeep(t *testing.T) {
	for _, n := range []int{MaxJSONDepth + 1, 20000} {
		deep := strings.Repeat("[ ", n) + strings.Repeat("] ", n)
		in := strings.Replace(sampleTransaction, `"metadata":{`, `"metadata":{"deep": `+deep+`, `, 1)
		if in == sampleTransaction {
			t.Fatal("sample lacks metadata")
		}
		_, err := DecodeAt([]byte(in), sampleNow)
		if !errors.Is(err, ErrOutOfLimits) || !strings.Contains(err.Error(), "metadata: ") || !strings.HasSuffix(err.Error(), ReasonTooDeep) {
			t.Errorf("%d levels: Decode = %v, want ErrOutOfLimits naming metadata and ending %q", n, err, ReasonTooDeep)
		}
	}
}
