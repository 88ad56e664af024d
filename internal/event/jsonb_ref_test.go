package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"testing"
	"unicode/utf8"
)

// checkJSONTokens is CheckJSON written plainly, on encoding/json tokens:
// the reference the byte scanner is fuzzed against.
func checkJSONTokens(raw []byte) error {
	if !utf8.Valid(raw) {
		return fmt.Errorf("%w: not valid UTF-8", ErrJSONB)
	}
	if err := checkEscapes(raw); err != nil {
		return fmt.Errorf("%w: %v", ErrJSONB, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		obj     bool
		wantKey bool
		keys    map[string]struct{}
		key     string
	}
	var stack []frame
	path := func(depth int) string {
		var b []byte
		for _, f := range stack[:depth] {
			if f.obj && f.key != "" {
				if len(b) > 0 {
					b = append(b, '.')
				}
				b = append(b, f.key...)
			}
		}
		if len(b) > 80 {
			b = append(b[:80], "…"...)
		}
		if len(b) == 0 {
			return "the top level"
		}
		return strconv.Quote(string(b))
	}
	values := 0 // top-level values begun
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) > 0 || values != 1 {
				return fmt.Errorf("%w: invalid JSON", ErrJSONB)
			}
			break
		}
		if err != nil {
			return fmt.Errorf("%w: invalid JSON", ErrJSONB)
		}
		if len(stack) == 0 {
			if values++; values > 1 {
				return fmt.Errorf("%w: data after the JSON value", ErrJSONB)
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
			if _, dup := top.keys[k]; dup {
				return fmt.Errorf("%w: key %.40q appears twice in the object at %s", ErrJSONB, k, path(n-1))
			}
			top.keys[k] = struct{}{}
			top.key, top.wantKey = k, false
			continue
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= MaxJSONDepth {
					return fmt.Errorf("%w: nested deeper than %d", ErrJSONB, MaxJSONDepth)
				}
				stack = append(stack, frame{obj: t == '{', wantKey: t == '{', keys: map[string]struct{}{}})
			case ']':
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case json.Number:
			if err := checkNumber(string(t)); err != nil {
				return fmt.Errorf("%w: number at %s: %v", ErrJSONB, path(len(stack)), err)
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
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Fatalf("CheckJSON(%q) = %v, the token check %v", b, got, want)
		}
	})
}
