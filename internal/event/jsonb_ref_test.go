package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"unicode/utf8"
)

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
