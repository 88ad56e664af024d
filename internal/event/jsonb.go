package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// What PostgreSQL's jsonb takes, checked before a record is accepted or
// stored, so that metadata and attributes are never refused by the
// database (a refused row is dead-lettered after the client was told
// "accepted"):
//   - text is valid UTF-8 and holds no \u0000 (22P05 "unsupported Unicode
//     escape sequence") and no unpaired surrogate escape (22P02);
//   - a number is one numeric holds; jsonb takes up to 131,072 digits before
//     the point and 16,383 after (1e999999 is 22003 "value overflows
//     numeric format"), and ours is stricter: at most MaxJSONNumberDigits on
//     either side, so a 16 KiB object cannot expand into megabytes of digits
//     when a rule reads it;
//   - nesting is at most MaxJSONDepth deep;
//   - no object names a key twice. jsonb keeps the last value, other parsers
//     the first: a gateway that checks the first "amount" and a store that
//     keeps the second disagree (a parser differential), so a duplicate
//     key is refused, in every JSON object we read.
//
// Errors name the fault and where (a key path), never a value.
const (
	// MaxJSONDepth bounds the nesting of arrays and objects.
	MaxJSONDepth = 64
	// MaxJSONNumberDigits bounds a number's digits before and after the
	// point, its exponent applied.
	MaxJSONNumberDigits = 1000
)

// ErrJSONB is wrapped by every error CheckJSON and CheckJSONB return.
var ErrJSONB = errors.New("JSON that PostgreSQL's jsonb would refuse or read differently")

// CheckJSONB checks a metadata or attributes value: a JSON object of at most
// MaxObjectBytes that CheckJSON accepts.
func CheckJSONB(raw []byte) error {
	if len(raw) > MaxObjectBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrJSONB, len(raw), MaxObjectBytes)
	}
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("%w: want a JSON object", ErrJSONB)
	}
	return CheckJSON(raw)
}

// CheckJSON checks one JSON value against the rules above (any size).
func CheckJSON(raw []byte) error {
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

// checkEscapes refuses \u0000 and unpaired surrogate escapes inside JSON
// strings (encoding/json turns the latter into U+FFFD, PostgreSQL refuses
// them).
func checkEscapes(raw []byte) error {
	in := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !in {
			if c == '"' {
				in = true
			}
			continue
		}
		switch c {
		case '"':
			in = false
		case '\\':
			if i+1 >= len(raw) {
				return nil // the decoder reports it
			}
			if raw[i+1] != 'u' {
				i++
				continue
			}
			r, ok := hex4(raw, i+2)
			if !ok {
				return nil
			}
			switch {
			case r == 0:
				return errors.New(`\u0000 in a string`)
			case r >= 0xDC00 && r <= 0xDFFF:
				return errors.New("an unpaired surrogate escape in a string")
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := rune(0), false
				if i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
					lo, ok = hex4(raw, i+8)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return errors.New("an unpaired surrogate escape in a string")
				}
				i += 11
				continue
			}
			i += 5
		}
	}
	return nil
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[at:at+4]), 16, 32)
	return rune(v), err == nil
}

// checkNumber checks a JSON number's digits before and after the point,
// its exponent applied.
func checkNumber(s string) error {
	if s != "" && s[0] == '-' {
		s = s[1:]
	}
	mant, expText := s, ""
	for i := 0; i < len(s); i++ {
		if s[i] == 'e' || s[i] == 'E' {
			mant, expText = s[:i], s[i+1:]
			break
		}
	}
	intPart, frac := mant, ""
	for i := 0; i < len(mant); i++ {
		if mant[i] == '.' {
			intPart, frac = mant[:i], mant[i+1:]
			break
		}
	}
	digits := intPart + frac
	lead := 0
	for lead < len(digits) && digits[lead] == '0' {
		lead++
	}
	if lead == len(digits) {
		return nil // zero, whatever its exponent
	}
	trail := 0
	for digits[len(digits)-1-trail] == '0' {
		trail++
	}
	exp := 0
	if expText != "" {
		if expText[0] == '+' {
			expText = expText[1:]
		}
		if len(expText) > 8 {
			return errors.New("exponent out of range")
		}
		var err error
		if exp, err = strconv.Atoi(expText); err != nil {
			return errors.New("malformed exponent")
		}
	}
	intDigits := len(intPart) - lead + exp
	fracDigits := len(digits) - trail - len(intPart) - exp
	if intDigits > MaxJSONNumberDigits || fracDigits > MaxJSONNumberDigits {
		return fmt.Errorf("more than %d digits before or after the point", MaxJSONNumberDigits)
	}
	return nil
}
