package event

import (
	"errors"
	"strings"
	"testing"
)

// CheckJSONB accepts what jsonb stores as sent and refuses what PostgreSQL
// refuses (22P05, 22P02, 22003) or reads differently from other parsers
// (duplicate keys); TestNothingAcceptedTheDatabaseRefuses in plugins/ingestapi checks
// the same values against a real server.
func TestCheckJSONB(t *testing.T) {
	ok := []string{
		`{}`, `{"a":1}`, `{"a":"x\u00e9\ud83d\ude00"}`, `{"a":[1,2,{"b":null}],"c":true}`,
		`{"n":1e999}`, `{"n":1e-1000}`, `{"n":0.5e1000}`, `{"n":0e999999}`, `{"n":-12.5E+3}`, `{"a":{"a":1}}`,
		`{"a":"\\u0000"}`, // an escaped backslash then "u0000": no NUL
		`{"k1":1,"k2":1}`,
	}
	bad := map[string]string{
		`{"a":"\u0000"}`:                         `\u0000`,
		`{"a":"x\ud800"}`:                        "surrogate",
		`{"a":"\udc00"}`:                         "surrogate",
		`{"a":"\ud800\u0041"}`:                   "surrogate",
		`{"\u0000":1}`:                           `\u0000`,
		`{"n":1e999999}`:                         "digits",
		`{"n":1e1001}`:                           "digits",
		`{"n":1e-1001}`:                          "digits",
		`{"n":1e123456789}`:                      "exponent",
		`{"amount":"10.00","amount":"99999.00"}`: "twice",
		`{"a":{"b":1,"b":2}}`:                    `a.b: key named twice`,
		`{"a":1,"\u0061":2}`:                     "twice",
		`[1]`:                                    "object",
		"{\"a\":\"\xff\"}":                       "UTF-8",
		`{"a":`:                                  "JSON ends early",
		`{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`: "nested more than 64 levels deep",
		`{"a":"` + strings.Repeat("x", MaxObjectBytes) + `"}`:             "bytes",
	}
	for _, s := range ok {
		if err := CheckJSONB([]byte(s)); err != nil {
			t.Errorf("CheckJSONB(%.60s) = %v, want nil", s, err)
		}
	}
	for s, want := range bad {
		err := CheckJSONB([]byte(s))
		if err == nil || !errors.Is(err, ErrJSONB) || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckJSONB(%.60q) = %v, want ErrJSONB mentioning %q", s, err, want)
		}
	}
}
