package event

import (
	"strings"
	"testing"
)

// checkJSONBodySeeds are values with and without backslashes, valid and
// not: CheckJSONBody must answer each exactly as CheckJSON does.
var checkJSONBodySeeds = []string{
	`{}`, `{"a":1}`, `{"a":"x\u00e9"}`, `{"a":"\u0000"}`, `{"a":"\\u0000"}`, `{"a":"x\ud800"}`,
	`{"a":[1,2,{"b":null}],"c":true}`, `{"n":1e999999}`, `{"a":1,"\u0061":2}`, `{"a":{"b":1,"b":2}}`,
	`[1,[2,[3]]]`, `{} {}`, `{}x`, `{} 1`, `-0.5e+3`, `01`, `1.`, `"\x"`, `{"a" 1}`, `[1,]`, `{"a":1,}`, ``, ` `,
	` {"items":[{"k":"v","n":{"m":[true,false,null]}}]} `, "\"a\tb\"", "\"a\x01b\"", "{\"a\":\"\xff\"}",
	`{"items":[{"external_id":"t-1","amount":"1.00"},{"external_id":"t-1","amount":"1.00","amount":"2"}]}`,
	`{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
}

func TestCheckJSONBodyIsCheckJSON(t *testing.T) {
	for _, s := range checkJSONBodySeeds {
		got, want := CheckJSONBody([]byte(s)), CheckJSON([]byte(s))
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Errorf("CheckJSONBody(%.60q) = %v, CheckJSON %v", s, got, want)
		}
	}
}

func FuzzCheckJSONBody(f *testing.F) {
	for _, s := range checkJSONBodySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := CheckJSONBody(b), CheckJSON(b)
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Fatalf("CheckJSONBody(%q) = %v, CheckJSON %v", b, got, want)
		}
	})
}
