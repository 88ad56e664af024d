package apirequest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"unsafe"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// The field reader both APIs read a request's objects with: its members
// split by internal/event's scanner, each field read by name, every failure
// collected with its path.

// FieldReader reads the fields of one JSON object by name, collecting every
// failure with its path instead of stopping at the first.
type FieldReader struct {
	sealer   *identity.Sealer // the request's, for its identifiers; nil: one per identifier
	text     *bodyText        // the request's body as text, strings are cut from; nil: copied each
	records  *RecordSlab      // the request's buffer the records are appended to; nil: one each
	slab     *[]event.Member  // the request's buffer of object members; nil: one slice an object
	wsPrefix string           // "<workspace>:", the Kafka keys' start; "": made per item
	keys     *[]byte          // the request's buffer the Kafka keys are cut from; nil: one each
	// The object's path, written only when a failure names it: path, or
	// items[item-1] when item is set, or parent's path and name.
	path    string
	item    int
	parent  *FieldReader
	name    string
	fields  []event.Member // the object's members in order (a repeated key: the last counts)
	Errs    *[]FieldError
	ownErrs []FieldError // errs of a reader that is not nested
	nested  []*FieldReader
	// spares are readers sub may reset and use instead of allocating one
	// (a request's item readers share them: each item's are done with
	// before the next item is read).
	spares  []*FieldReader
	present bool
	// Checked: the bytes read passed CheckBody, so an object value needs
	// no second look for what jsonb refuses.
	Checked bool
	// NoRecord: the caller encodes the envelope itself (the decision API
	// adds its decision first), so an item leaves Value empty rather than
	// encoding a record nobody reads.
	NoRecord bool
}

// objectPath is the path of the reader's object.
func (r *FieldReader) objectPath() string {
	switch {
	case r.parent != nil:
		return joinPath(r.parent.objectPath(), r.name)
	case r.item > 0:
		return ItemPath(r.item - 1)
	}
	return r.path
}

// NewFieldReader fails the whole request only when raw is not an object; a
// field of the wrong type is the item's fault and reported per field.
func NewFieldReader(raw json.RawMessage, path string) (*FieldReader, error) {
	return newSlabReader(raw, path, nil)
}

// newSlabReader is newFieldReader with the members of raw's objects kept
// in slab, the request's one buffer of them (nil: one slice an object).
func newSlabReader(raw json.RawMessage, path string, slab *[]event.Member) (*FieldReader, error) {
	r := &FieldReader{path: path, present: true, slab: slab}
	return r, r.start(raw)
}

// newItemReader is newSlabReader for items[i], its path written only when
// a failure names it.
func newItemReader(raw json.RawMessage, i int, slab *[]event.Member) (*FieldReader, error) {
	r := &FieldReader{item: i + 1, present: true, slab: slab}
	return r, r.start(raw)
}

func (r *FieldReader) start(raw json.RawMessage) error {
	r.Errs = &r.ownErrs
	var ok bool
	if r.fields, ok = r.split(raw); !ok {
		return fmt.Errorf("%w: %s: want a JSON object", ErrMalformed, r.objectPath())
	}
	return nil
}

// split splits an object into its members, in the reader's slab when it
// has one.
func (r *FieldReader) split(raw []byte) ([]event.Member, bool) {
	if r.slab == nil {
		return event.AppendMembers(make([]event.Member, 0, 16), raw)
	}
	start := len(*r.slab)
	grown, ok := event.AppendMembers(*r.slab, raw)
	if !ok {
		return nil, false
	}
	*r.slab = grown
	return grown[start:len(grown):len(grown)], true
}

// joinPath is path.field, either part possibly empty.
func joinPath(path, field string) string {
	switch {
	case path == "":
		return field
	case field == "":
		return path
	}
	return path + "." + field
}

// failAt reports a fault found inside field's value, at its path.
func (r *FieldReader) failAt(field string, f *event.JSONFault) {
	*r.Errs = append(*r.Errs, FaultField(joinPath(r.objectPath(), field), f))
}

func (r *FieldReader) Fail(field, msg string) {
	*r.Errs = append(*r.Errs, FieldError{Field: joinPath(r.objectPath(), field), Message: msg})
}

// raw returns a field's JSON, nil when absent or null.
func (r *FieldReader) raw(field string) json.RawMessage {
	var v json.RawMessage
	for i := range r.fields {
		if string(r.fields[i].Key) == field {
			r.fields[i].Read = true
			v = r.fields[i].Value // the last of repeated keys, as a map keeps it
		}
	}
	if v == nil || string(v) == "null" {
		return nil
	}
	return v
}

// Str reads a string field of at most max bytes with no control characters.
func (r *FieldReader) Str(field string, required bool, max int) string {
	v := r.raw(field)
	if v == nil {
		if required {
			r.Fail(field, "required")
		}
		return ""
	}
	s, ok := r.plainString(v)
	if !ok {
		if s, ok = event.Unquote(v); !ok {
			r.Fail(field, "want a string")
			return ""
		}
	}
	if s == "" && required {
		r.Fail(field, "required, must not be empty")
		return ""
	}
	return r.valid(field, s, event.CheckText(s, max))
}

// valid is s, or "" with err reported on field when there is one.
func (r *FieldReader) valid(field, s string, err error) string {
	if err != nil {
		r.Fail(field, err.Error())
		return ""
	}
	return s
}

// ExternalID reads an external ID: a string, not empty or only whitespace
// (event.CheckExternalID).
func (r *FieldReader) ExternalID(field string, required bool) string {
	s := r.Str(field, required, MaxIDLen)
	if s == "" {
		return ""
	}
	return r.valid(field, s, event.CheckExternalID(s))
}

// plainString reads a JSON string without escapes straight from its bytes,
// the common case, sparing a decoder call per field. The caller still
// checks UTF-8 and control characters.
func plainString(v json.RawMessage) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || bytes.IndexByte(v[1:len(v)-1], '\\') >= 0 || bytes.IndexByte(v[1:len(v)-1], '"') >= 0 {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

// plainString is plainString cut from the request's text when the reader
// has it and v is a slice of its body: no allocation.
func (r *FieldReader) plainString(v json.RawMessage) (string, bool) {
	if r.text == nil {
		return plainString(v)
	}
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || bytes.IndexByte(v[1:len(v)-1], '\\') >= 0 || bytes.IndexByte(v[1:len(v)-1], '"') >= 0 {
		return "", false
	}
	if s, ok := r.text.cut(v[1 : len(v)-1]); ok {
		return s, true
	}
	return string(v[1 : len(v)-1]), true
}

// bodyText is a request body and the same bytes as a string, which the
// items' strings are cut from: no allocation a field (copies of the
// fields would be 4 of an item's 21) and no copy of the body (one copy a
// request would be 8 % of the bytes allocated at the benchmark's load).
// The body is the request's own buffer (readAllSized), never written after
// it was read nor reused, so the strings read it in place; every one of
// them keeps it alive only as long as the request's items live.
type bodyText struct {
	b []byte
	s string
}

func newBodyText(body []byte) *bodyText {
	return &bodyText{b: body, s: unsafe.String(unsafe.SliceData(body), len(body))}
}

// cut is v's text when v is a slice of the body (false otherwise: an item
// the careful path copied out of it).
func (t *bodyText) cut(v []byte) (string, bool) {
	if len(v) == 0 || len(t.b) == 0 {
		return "", false
	}
	off := uintptr(unsafe.Pointer(unsafe.SliceData(v))) - uintptr(unsafe.Pointer(unsafe.SliceData(t.b)))
	if off >= uintptr(len(t.b)) || uintptr(len(v)) > uintptr(len(t.b))-off {
		return "", false
	}
	return t.s[off : off+uintptr(len(v))], true
}

// WithUnknown is errs and an "unknown field" error for each field nobody
// read.
func (r *FieldReader) WithUnknown(errs []FieldError) []FieldError {
	for _, u := range r.UnknownFields() {
		errs = append(errs, FieldError{Field: u, Message: "unknown field"})
	}
	return errs
}

// UnknownFields lists the paths of fields nobody read, nested ones included.
func (r *FieldReader) UnknownFields() []string {
	var out []string
	if r.present {
		var seen map[string]bool // a repeated unknown key is listed once
		for _, f := range r.fields {
			if f.Read || seen[string(f.Key)] {
				continue
			}
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[string(f.Key)] = true
			out = append(out, joinPath(r.objectPath(), string(f.Key)))
		}
	}
	for _, n := range r.nested {
		out = append(out, n.UnknownFields()...)
	}
	sort.Strings(out)
	return out
}
