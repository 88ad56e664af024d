package event

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// CheckJSONBody is CheckJSON for a large value such as an ingest request's
// body: the same answer (TestCheckJSONBodyIsCheckJSON, FuzzCheckJSONBody),
// but a value without a backslash skips the escape scan, a second pass
// over every byte (5 % of the ingest API's CPU): it can hold no escape, and
// bytes.IndexByte finds a backslash at memory speed. Added beside CheckJSON
// rather than into it, which other roles' code owns.
func CheckJSONBody(raw []byte) error {
	if bytes.IndexByte(raw, '\\') >= 0 {
		return CheckJSON(raw)
	}
	if !utf8.Valid(raw) {
		return fmt.Errorf("%w: not valid UTF-8", ErrJSONB)
	}
	// From here as CheckJSON after its escape scan.
	st := jsonStacks.Get().(*[]jsonFrame)
	defer func() {
		for i := range *st {
			f := &(*st)[i]
			clear(f.keys) // the keys point into raw: keep none of it alive
			f.key, f.keys, f.set = nil, f.keys[:0], nil
		}
		jsonStacks.Put(st)
	}()
	c := jsonChecker{raw: raw, stack: (*st)[:0]}
	defer func() { *st = c.stack[:cap(c.stack)] }()
	c.skipWS()
	if c.i >= len(raw) {
		return fmt.Errorf("%w: invalid JSON", ErrJSONB)
	}
	if err := c.value(); err != nil {
		return err
	}
	c.skipWS()
	if c.i < len(raw) {
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
