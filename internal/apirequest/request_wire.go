package apirequest

import (
	"errors"
	"fmt"
	"strings"

	"github.com/speculapro/speculapro/internal/event"
)

// The request wire format, one for every endpoint that takes a body (a
// batch, a decision, a customer, an account): each body is checked once by
// event.CheckJSONIn before a field is read, so a key named twice, a number
// numeric cannot hold, a \u0000, invalid UTF-8 or nesting too deep is
// refused by every endpoint alike, located and worded alike, and reported
// once: a body whose bytes hold a fault is answered with that fault alone,
// since what the field reader makes of such bytes follows from it (a "want
// a string" for a value nested too deep, "contains control characters" for
// a \u0000, an identifier checked against the second of two
// identifier_kinds: which value of a key named twice counts is exactly what
// is undefined). Its limits are internal/event's (limits.go, jsonb.go), the ones the
// persister's decoder applies.

// How many levels down a body's fields' values are: the nesting limit
// (event.MaxJSONDepth) counts from a field's value, so a transaction may
// nest its metadata as deep in a batch as in a decision.
const (
	framingBatch  = 3 // {"items":[{fields}]}
	FramingObject = 1 // {fields}: a decision, a customer, an account
)

// CheckBody checks a request body: a syntax fault (not JSON at all) is the
// request's error (ErrMalformed); any other fault is returned to be placed
// on the field it is in.
func CheckBody(body []byte, framing int) (*event.JSONFault, error) {
	err := event.CheckJSONIn(body, framing)
	if err == nil {
		return nil, nil
	}
	var f *event.JSONFault
	if !errors.As(err, &f) {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if f.Syntax {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, f.Reason)
	}
	return f, nil
}

// checkItem checks one item of a batch whose body failed: its fault, if
// any, as a FieldError under the item's path.
func checkItem(raw []byte, i int) *FieldError {
	var f *event.JSONFault
	if !errors.As(event.CheckJSONIn(raw, FramingObject), &f) {
		return nil
	}
	fe := FaultField(ItemPath(i), f)
	return &fe
}

// FaultField is a fault as the field error answered: its path under
// prefix, its reason.
func FaultField(prefix string, f *event.JSONFault) FieldError {
	return FieldError{Field: joinWirePath(prefix, f.Path), Message: f.Reason}
}

// FaultError is a fault outside every field (a batch's envelope) as the
// request's error.
func FaultError(f *event.JSONFault) error {
	if f.Path == "" {
		return fmt.Errorf("%w: %s", ErrMalformed, f.Reason)
	}
	return fmt.Errorf("%w: %s: %s", ErrMalformed, f.Path, f.Reason)
}

// joinWirePath is joinPath for a fault's path, which may start with an
// array index.
func joinWirePath(prefix, path string) string {
	if strings.HasPrefix(path, "[") {
		return prefix + path
	}
	return joinPath(prefix, path)
}
