package apirequest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/speculapro/speculapro/internal/event"
)

// The field reader's typed values: enums, amounts, currencies, countries
// and jsonb objects, each refused with a message that never quotes it.

func (r *FieldReader) Enum(field string, required bool, allowed ...string) string {
	s := r.Str(field, required, MaxLabelLen)
	if s == "" {
		return ""
	}
	for _, a := range allowed {
		if s == a {
			return s
		}
	}
	r.Fail(field, "want one of "+strings.Join(allowed, ", "))
	return ""
}

// amount reads a non-negative decimal string that numeric(20,4) holds
// exactly: a float would lose cents, and a value the column would round is
// refused rather than changed.
func (r *FieldReader) amount(field string) string {
	v := r.raw(field)
	if v == nil {
		r.Fail(field, "required")
		return ""
	}
	s, ok := r.plainString(v)
	if !ok {
		if s, ok = event.Unquote(v); !ok {
			r.Fail(field, `want a decimal string such as "1249.90", not a JSON number`)
			return ""
		}
	}
	return r.valid(field, s, event.CheckAmount(s))
}

func (r *FieldReader) Currency(field string, required bool) string {
	s := r.Str(field, required, MaxLabelLen)
	if s == "" {
		return ""
	}
	if !event.IsCurrency(s) {
		r.Fail(field, `want an ISO 4217 currency code such as "EUR"`)
		return ""
	}
	return s
}

func (r *FieldReader) Country(field string) string {
	s := r.Str(field, false, MaxLabelLen)
	if s == "" {
		return ""
	}
	if len(s) != 2 || s[0] < 'A' || s[0] > 'Z' || s[1] < 'A' || s[1] > 'Z' {
		r.Fail(field, `want an ISO 3166-1 alpha-2 country code such as "DE"`)
		return ""
	}
	return s
}

// Object reads a JSON object that jsonb stores as sent (event.CheckJSONB:
// at most event.MaxObjectBytes, no \u0000, numbers numeric holds, no
// duplicate key), compacted.
func (r *FieldReader) Object(field string) json.RawMessage {
	v := r.raw(field)
	if v == nil {
		return nil
	}
	var err error
	switch {
	case !r.Checked:
		err = event.CheckJSONB(v)
	case len(v) > event.MaxObjectBytes:
		err = fmt.Errorf("%d bytes, at most %d", len(v), event.MaxObjectBytes)
	case v[0] != '{':
		err = errors.New("want a JSON object")
	}
	if err != nil {
		var f *event.JSONFault
		if errors.As(err, &f) {
			r.failAt(field, f)
		} else {
			r.Fail(field, err.Error())
		}
		return nil
	}
	if !bytes.ContainsAny(v, " \t\r\n") {
		return v[:len(v):len(v)] // compact already: the body's bytes, which nobody writes
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, v)
	return buf.Bytes()
}

// sub reads a nested object's fields; absent or null gives a reader that
// reports nothing present.
func (r *FieldReader) sub(field string) *FieldReader {
	var n *FieldReader
	if k := len(r.nested); k < len(r.spares) {
		n = r.spares[k]
		*n = FieldReader{parent: r, name: field, Errs: r.Errs, slab: r.slab, text: r.text, Checked: r.Checked}
	} else {
		n = &FieldReader{parent: r, name: field, Errs: r.Errs, slab: r.slab, text: r.text, Checked: r.Checked}
	}
	r.nested = append(r.nested, n)
	v := r.raw(field)
	if v == nil {
		return n
	}
	var ok bool
	if n.fields, ok = r.split(v); !ok {
		r.Fail(field, "want a JSON object")
		return n
	}
	n.present = true
	return n
}
