package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
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
	// A loop, not bytes.TrimLeft, which built its byte set on every call.
	i := 0
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\r' || raw[i] == '\n') {
		i++
	}
	if i == len(raw) || raw[i] != '{' {
		return fmt.Errorf("%w: want a JSON object", ErrJSONB)
	}
	return CheckJSON(raw)
}

// CheckJSON checks one JSON value against the rules above (any size). It
// scans the bytes itself (no tokens, no maps for objects of up to
// jsonLinearKeys keys), so checking a whole request body costs about as
// much as reading it once.
func CheckJSON(raw []byte) error {
	if !utf8.Valid(raw) {
		return fmt.Errorf("%w: not valid UTF-8", ErrJSONB)
	}
	// Only a \u escape can be refused there: without a backslash (nearly
	// all metadata) the byte-wise walk is skipped.
	if bytes.IndexByte(raw, '\\') >= 0 {
		if err := checkEscapes(raw); err != nil {
			return fmt.Errorf("%w: %v", ErrJSONB, err)
		}
	}
	// The frames and their keys' slices are reused: growing them anew costs
	// the persister five allocations a record. Put back without a defer
	// (checkJSON does not panic): two deferred closures would be a third
	// of checking a small object.
	st := jsonStacks.Get().(*[]jsonFrame)
	c := jsonChecker{raw: raw, stack: (*st)[:0]}
	err := c.check()
	*st = c.stack[:cap(c.stack)]
	for i := range *st {
		f := &(*st)[i]
		clear(f.keys) // the keys point into raw: keep none of it alive
		f.key, f.keys, f.set = nil, f.keys[:0], nil
	}
	jsonStacks.Put(st)
	return err
}

// check is CheckJSON's grammar and rules, after its byte-level checks.
func (c *jsonChecker) check() error {
	raw := c.raw
	c.skipWS()
	if c.i >= len(raw) {
		return fmt.Errorf("%w: invalid JSON", ErrJSONB)
	}
	if err := c.value(); err != nil {
		return err
	}
	c.skipWS()
	if c.i < len(raw) {
		// Another value after the first (a stream), or garbage: a value
		// that begins well is "data after", whatever follows it.
		if ch := raw[c.i]; ch == '{' || ch == '[' {
			return fmt.Errorf("%w: data after the JSON value", ErrJSONB)
		}
		c.stack, c.grammarOnly = c.stack[:0], true
		if c.value() == nil {
			return fmt.Errorf("%w: data after the JSON value", ErrJSONB)
		}
		return errInvalidJSON
	}
	return nil
}

// jsonLinearKeys: an object's keys are compared one by one up to this
// many, then through a map (a huge object must not cost n² compares).
const jsonLinearKeys = 16

// jsonStacks holds CheckJSON's frame stacks (*[]jsonFrame, full length).
var jsonStacks = sync.Pool{New: func() any { s := make([]jsonFrame, 0, 4); return &s }}

// jsonFrame is one open object or array.
type jsonFrame struct {
	obj  bool
	key  []byte // the object's current key, decoded
	keys [][]byte
	set  map[string]struct{}
}

type jsonChecker struct {
	raw         []byte
	i           int
	stack       []jsonFrame
	grammarOnly bool // numbers: their syntax only, not their digits
}

var errInvalidJSON = fmt.Errorf("%w: invalid JSON", ErrJSONB)

func (c *jsonChecker) skipWS() {
	for c.i < len(c.raw) {
		switch c.raw[c.i] {
		case ' ', '\t', '\r', '\n':
			c.i++
		default:
			return
		}
	}
}

// path is the key path to the frames below depth, as errors name it.
func (c *jsonChecker) path(depth int) string {
	var b []byte
	for _, f := range c.stack[:depth] {
		if f.obj && len(f.key) > 0 {
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

// push opens a frame, reusing the keys slice a frame at that depth had.
func (c *jsonChecker) push(obj bool) error {
	if len(c.stack) >= MaxJSONDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrJSONB, MaxJSONDepth)
	}
	if len(c.stack) < cap(c.stack) {
		c.stack = c.stack[:len(c.stack)+1]
		f := &c.stack[len(c.stack)-1]
		f.obj, f.key, f.keys, f.set = obj, nil, f.keys[:0], nil
		return nil
	}
	c.stack = append(c.stack, jsonFrame{obj: obj})
	return nil
}

func (c *jsonChecker) value() error {
	if c.i >= len(c.raw) {
		return errInvalidJSON
	}
	switch ch := c.raw[c.i]; {
	case ch == '{':
		return c.object()
	case ch == '[':
		return c.array()
	case ch == '"':
		_, _, err := c.str()
		return err
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number()
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	}
	return errInvalidJSON
}

func (c *jsonChecker) literal(lit string) error {
	if len(c.raw)-c.i < len(lit) || string(c.raw[c.i:c.i+len(lit)]) != lit {
		return errInvalidJSON
	}
	c.i += len(lit)
	return nil
}

// str reads a string at c.i: its content between the quotes and whether
// it holds escapes.
func (c *jsonChecker) str() (content []byte, escaped bool, err error) {
	start := c.i + 1
	for j := start; j < len(c.raw); j++ {
		switch ch := c.raw[j]; {
		case ch == '"':
			c.i = j + 1
			return c.raw[start:j], escaped, nil
		case ch == '\\':
			escaped = true
			if j+1 >= len(c.raw) {
				return nil, false, errInvalidJSON
			}
			switch c.raw[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if _, ok := hex4(c.raw, j+2); !ok {
					return nil, false, errInvalidJSON
				}
				j += 5
			default:
				return nil, false, errInvalidJSON
			}
		case ch < 0x20:
			return nil, false, errInvalidJSON
		}
	}
	return nil, false, errInvalidJSON
}

func (c *jsonChecker) number() error {
	start, r := c.i, c.raw
	j := c.i
	if j < len(r) && r[j] == '-' {
		j++
	}
	digits := func() int {
		k := j
		for j < len(r) && r[j] >= '0' && r[j] <= '9' {
			j++
		}
		return j - k
	}
	switch {
	case j < len(r) && r[j] == '0':
		j++
	case digits() == 0:
		return errInvalidJSON
	}
	if j < len(r) && r[j] == '.' {
		j++
		if digits() == 0 {
			return errInvalidJSON
		}
	}
	if j < len(r) && (r[j] == 'e' || r[j] == 'E') {
		j++
		if j < len(r) && (r[j] == '+' || r[j] == '-') {
			j++
		}
		if digits() == 0 {
			return errInvalidJSON
		}
	}
	c.i = j
	if c.grammarOnly {
		return nil
	}
	if err := checkNumber(string(r[start:j])); err != nil {
		return fmt.Errorf("%w: number at %s: %v", ErrJSONB, c.path(len(c.stack)), err)
	}
	return nil
}

func (c *jsonChecker) array() error {
	if err := c.push(false); err != nil {
		return err
	}
	c.i++
	c.skipWS()
	if c.i < len(c.raw) && c.raw[c.i] == ']' {
		c.i++
		c.stack = c.stack[:len(c.stack)-1]
		return nil
	}
	for {
		c.skipWS()
		if err := c.value(); err != nil {
			return err
		}
		if done, err := c.afterMember(']'); done || err != nil {
			return err
		}
	}
}

func (c *jsonChecker) object() error {
	if err := c.push(true); err != nil {
		return err
	}
	n := len(c.stack)
	c.i++
	c.skipWS()
	if c.i < len(c.raw) && c.raw[c.i] == '}' {
		c.i++
		c.stack = c.stack[:n-1]
		return nil
	}
	for {
		c.skipWS()
		if c.i >= len(c.raw) || c.raw[c.i] != '"' {
			return errInvalidJSON
		}
		content, escaped, err := c.str()
		if err != nil {
			return err
		}
		key := content
		if escaped {
			var s string
			if json.Unmarshal(c.raw[c.i-len(content)-2:c.i], &s) != nil {
				return errInvalidJSON
			}
			key = []byte(s)
		}
		f := &c.stack[n-1]
		if f.seen(key) {
			return fmt.Errorf("%w: key %.40q appears twice in the object at %s", ErrJSONB, key, c.path(n-1))
		}
		f.key = key
		c.skipWS()
		if c.i >= len(c.raw) || c.raw[c.i] != ':' {
			return errInvalidJSON
		}
		c.i++
		c.skipWS()
		if err := c.value(); err != nil {
			return err
		}
		if done, err := c.afterMember('}'); done || err != nil {
			return err
		}
	}
}

// afterMember reads what follows an array element or an object member: ','
// (another follows) or closing, which ends the container and pops its frame
// (the value just read has popped its own, so the container's is on top).
func (c *jsonChecker) afterMember(closing byte) (done bool, err error) {
	c.skipWS()
	if c.i >= len(c.raw) {
		return false, errInvalidJSON
	}
	switch c.raw[c.i] {
	case ',':
		c.i++
		return false, nil
	case closing:
		c.i++
		c.stack = c.stack[:len(c.stack)-1]
		return true, nil
	}
	return false, errInvalidJSON
}

// seen reports whether the object named key before, and records it.
func (f *jsonFrame) seen(key []byte) bool {
	if f.set != nil {
		if _, dup := f.set[string(key)]; dup {
			return true
		}
		f.set[string(key)] = struct{}{}
		return false
	}
	for _, k := range f.keys {
		if bytes.Equal(k, key) {
			return true
		}
	}
	f.keys = append(f.keys, key)
	if len(f.keys) > jsonLinearKeys {
		f.set = make(map[string]struct{}, 2*len(f.keys))
		for _, k := range f.keys {
			f.set[string(k)] = struct{}{}
		}
	}
	return false
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
