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
// Errors are *JSONFault: the fault and where (a path of keys and array
// indices), never a value.
const (
	// MaxJSONDepth bounds the nesting of arrays and objects: the value
	// checked is level 1 (CheckJSONIn counts from a field's value).
	MaxJSONDepth = 64
	// MaxJSONNumberDigits bounds a number's digits before and after the
	// point, its exponent applied.
	MaxJSONNumberDigits = 1000
)

// ErrJSONB is wrapped by every error CheckJSON and CheckJSONB return.
var ErrJSONB = errors.New("JSON that PostgreSQL's jsonb would refuse or read differently")

// JSONFault is the one fault CheckJSON, CheckJSONIn and CheckJSONB report:
// the first in the document, so a value is refused for one reason, named
// once. It wraps ErrJSONB.
type JSONFault struct {
	// Path locates the fault inside the value checked: object keys joined
	// by "." and array indices in brackets ("tags[2].name"); "" is the
	// value itself. Long or unusual keys are quoted and shortened.
	Path string
	// Reason says what is wrong, never quoting a value.
	Reason string
	// Syntax: the bytes are not JSON (Reason gives the byte offset), as
	// opposed to JSON that parses but breaks a rule above.
	Syntax bool
}

func (f *JSONFault) Error() string {
	if f.Path == "" {
		return ErrJSONB.Error() + ": " + f.Reason
	}
	return ErrJSONB.Error() + ": " + f.Path + ": " + f.Reason
}

// Unwrap makes errors.Is(err, ErrJSONB) hold.
func (f *JSONFault) Unwrap() error { return ErrJSONB }

// The reasons a JSONFault gives, shared by every caller so that both APIs
// and the persister say the same thing about the same fault.
const (
	ReasonDuplicateKey = "key named twice in one object (JSON parsers disagree on which one counts)"
	ReasonNotUTF8      = "not valid UTF-8"
	ReasonNUL          = `\u0000 in a string`
	ReasonSurrogate    = "an unpaired surrogate escape in a string"
	ReasonEmpty        = "empty body"
	ReasonEndsEarly    = "JSON ends early"
	ReasonDataAfter    = "data after the JSON value"
)

// ReasonTooDeep is the fault of a value nested deeper than MaxJSONDepth.
var ReasonTooDeep = fmt.Sprintf("nested more than %d levels deep", MaxJSONDepth)

// CheckJSONB checks a metadata or attributes value: a JSON object of at most
// MaxObjectBytes that CheckJSON accepts.
func CheckJSONB(raw []byte) error {
	if len(raw) > MaxObjectBytes {
		return &JSONFault{Reason: fmt.Sprintf("%d bytes, at most %d", len(raw), MaxObjectBytes)}
	}
	// A loop, not bytes.TrimLeft, which built its byte set on every call.
	i := 0
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\r' || raw[i] == '\n') {
		i++
	}
	if i == len(raw) || raw[i] != '{' {
		return &JSONFault{Reason: "want a JSON object"}
	}
	return CheckJSON(raw)
}

// CheckJSON checks one JSON value against the rules above (any size). It
// scans the bytes itself (no tokens, no maps for objects of up to
// jsonLinearKeys keys), so checking a whole request body costs about as
// much as reading it once. The error, if any, is a *JSONFault.
func CheckJSON(raw []byte) error {
	return CheckJSONIn(raw, 0)
}

// CheckJSONIn is CheckJSON for a request body whose fields' values sit
// framing levels down (1 for a body that is one object of fields, 3 for
// {"items":[{fields}]}): MaxJSONDepth then bounds each field's value, as
// it bounds metadata on its own, so one limit holds whatever wraps it.
func CheckJSONIn(raw []byte, framing int) error {
	// Invalid UTF-8 and refused escapes are found by a quick pass over all
	// the bytes (nearly every body has neither, and without a backslash
	// the escape pass is skipped); only when one is there does the walk
	// check each string, to say where.
	strict := !utf8.Valid(raw) || (bytes.IndexByte(raw, '\\') >= 0 && checkEscapes(raw) != nil)
	// The frames and their keys' slices are reused: growing them anew costs
	// the persister five allocations a record. Put back without a defer
	// (checkJSON does not panic): two deferred closures would be a third
	// of checking a small object.
	st := jsonStacks.Get().(*[]jsonFrame)
	c := jsonChecker{raw: raw, stack: (*st)[:0], maxDepth: MaxJSONDepth + framing, strict: strict}
	err := c.check()
	*st = c.stack[:cap(c.stack)]
	for i := range *st {
		f := &(*st)[i]
		clear(f.keys) // the keys point into raw: keep none of it alive
		f.key, f.keys, f.set = nil, f.keys[:0], nil
	}
	jsonStacks.Put(st)
	if err == nil && strict {
		// The walk saw every string; a fault the quick pass found must
		// have been in one. Kept as a guard: never accept what it refused.
		if !utf8.Valid(raw) {
			return &JSONFault{Reason: ReasonNotUTF8}
		}
		return &JSONFault{Reason: checkEscapes(raw).Error()}
	}
	return err
}

// check is CheckJSON's grammar and rules, after its byte-level checks.
func (c *jsonChecker) check() error {
	raw := c.raw
	c.skipWS()
	if c.i >= len(raw) {
		return &JSONFault{Reason: ReasonEmpty, Syntax: true}
	}
	if err := c.value(); err != nil {
		return err
	}
	c.skipWS()
	if c.i < len(raw) {
		return &JSONFault{Reason: ReasonDataAfter, Syntax: true}
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
	n    int    // an array's current index
	key  []byte // the object's current key, decoded
	keys [][]byte
	set  map[string]struct{}
}

type jsonChecker struct {
	raw      []byte
	i        int
	stack    []jsonFrame
	maxDepth int
	strict   bool // check each string's UTF-8 and escapes (the quick pass found a fault)
}

// syntax is the fault of bytes that are not JSON, at c.i.
func (c *jsonChecker) syntax() error {
	if c.i >= len(c.raw) {
		return &JSONFault{Reason: ReasonEndsEarly, Syntax: true}
	}
	return &JSONFault{Reason: fmt.Sprintf("invalid JSON at byte %d", c.i), Syntax: true}
}

// fault is a rule's fault at the value being read (depth frames open).
func (c *jsonChecker) fault(depth int, reason string) error {
	return &JSONFault{Path: c.path(depth), Reason: reason}
}

func (c *jsonChecker) skipWS() { c.i = skipSpace(c.raw, c.i) }

// path is the path of the value the frames below depth are in, as
// JSONFault.Path gives it: at most about maxPathBytes, unusual keys quoted.
func (c *jsonChecker) path(depth int) string {
	var b []byte
	for _, f := range c.stack[:depth] {
		if len(b) > maxPathBytes {
			return string(append(b, "…"...))
		}
		if !f.obj {
			b = append(append(append(b, '['), strconv.Itoa(f.n)...), ']')
			continue
		}
		if len(b) > 0 {
			b = append(b, '.')
		}
		b = AppendPathKey(b, f.key)
	}
	return string(b)
}

// maxPathBytes bounds a fault's path: it locates, it does not copy.
const maxPathBytes = 120

// AppendPathKey appends key to a field path: as it is when it is a plain
// name (letters, digits, "_", "-", at most 64 bytes), else quoted and cut
// at 40 bytes, so that a path is never a channel for a value.
func AppendPathKey(b, key []byte) []byte {
	plain := len(key) > 0 && len(key) <= 64
	for _, ch := range key {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-') {
			plain = false
			break
		}
	}
	if plain {
		return append(b, key...)
	}
	if len(key) > 40 {
		cut := 40
		for cut > 0 && !utf8.RuneStart(key[cut]) {
			cut--
		}
		return append(strconv.AppendQuote(b, string(key[:cut])), "…"...)
	}
	return strconv.AppendQuote(b, string(key))
}

// push opens a frame, reusing the keys slice a frame at that depth had.
func (c *jsonChecker) push(obj bool) error {
	if len(c.stack) >= c.maxDepth {
		// Named at the field whose value nests too deep (the value checked
		// when there is no field): the levels below it are only "[0]"s.
		return c.fault(c.maxDepth-MaxJSONDepth, ReasonTooDeep)
	}
	if len(c.stack) < cap(c.stack) {
		c.stack = c.stack[:len(c.stack)+1]
		f := &c.stack[len(c.stack)-1]
		f.obj, f.n, f.key, f.keys, f.set = obj, 0, nil, f.keys[:0], nil
		return nil
	}
	c.stack = append(c.stack, jsonFrame{obj: obj})
	return nil
}

func (c *jsonChecker) value() error {
	if c.i >= len(c.raw) {
		return c.syntax()
	}
	switch ch := c.raw[c.i]; {
	case ch == '{':
		return c.object()
	case ch == '[':
		return c.array()
	case ch == '"':
		_, _, err := c.str(len(c.stack))
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
	return c.syntax()
}

func (c *jsonChecker) literal(lit string) error {
	var ok bool
	if c.i, ok = scanLiteral(c.raw, c.i, lit); !ok {
		return c.syntax()
	}
	return nil
}

// str reads a string at c.i (scanString): its content between the quotes
// and whether it holds escapes. In strict mode its UTF-8 and escapes are
// checked too, the fault located at depth's path.
func (c *jsonChecker) str(depth int) (content []byte, escaped bool, err error) {
	start := c.i
	end, flags, ok := scanString(c.raw, start)
	c.i = end
	if !ok {
		return nil, false, c.syntax()
	}
	content, escaped = c.raw[start+1:end-1], flags&strEscaped != 0
	if c.strict {
		if !utf8.Valid(content) {
			return nil, false, c.fault(depth, ReasonNotUTF8)
		}
		if escaped {
			if err := checkEscapes(c.raw[start:end]); err != nil {
				return nil, false, c.fault(depth, err.Error())
			}
		}
	}
	return content, escaped, nil
}

func (c *jsonChecker) number() error {
	start := c.i
	var ok bool
	if c.i, ok = scanNumber(c.raw, start); !ok {
		return c.syntax()
	}
	if err := checkNumber(string(c.raw[start:c.i])); err != nil {
		return c.fault(len(c.stack), err.Error())
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
		c.stack[len(c.stack)-1].n++
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
			return c.syntax()
		}
		content, escaped, err := c.str(n - 1)
		if err != nil {
			return err
		}
		key := content
		if escaped {
			var s string
			if json.Unmarshal(c.raw[c.i-len(content)-2:c.i], &s) != nil {
				return c.syntax()
			}
			key = []byte(s)
		}
		f := &c.stack[n-1]
		f.key = key
		if f.seen(key) {
			return c.fault(n, ReasonDuplicateKey)
		}
		c.skipWS()
		if c.i >= len(c.raw) || c.raw[c.i] != ':' {
			return c.syntax()
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
	var ok bool
	if c.i, done, ok = afterMember(c.raw, c.i, closing); !ok {
		return false, c.syntax()
	}
	if done {
		c.stack = c.stack[:len(c.stack)-1]
	}
	return done, nil
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
