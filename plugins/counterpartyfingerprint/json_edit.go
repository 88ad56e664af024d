package counterpartyfingerprint

import (
	"github.com/speculapro/speculapro/internal/event"
)

// The edits the processor makes to a message's JSON, on the members
// event.AppendMembers reads (the splitter the ingest API reads requests
// with) and written with event.AppendJSONString (the record encoder's
// strings). Only the objects on an edited path are written anew; every
// other value keeps its bytes.

// objectEdit is one object's members being edited.
type objectEdit struct {
	members []event.Member
	changed bool
}

// last is the index of the member named key that counts (encoding/json
// and jsonb keep the last of a key named twice), -1 when there is none.
func last(members []event.Member, key string) int {
	for i := len(members) - 1; i >= 0; i-- {
		if string(members[i].Key) == key {
			return i
		}
	}
	return -1
}

// memberString is the string value of the member named key; false when
// there is none or it is not a string.
func memberString(members []event.Member, key string) (string, bool) {
	i := last(members, key)
	if i < 0 {
		return "", false
	}
	return event.Unquote(members[i].Value)
}

// get is the value of the member named key.
func (o *objectEdit) get(key string) ([]byte, bool) {
	if i := last(o.members, key); i >= 0 {
		return o.members[i].Value, true
	}
	return nil, false
}

// remove removes every member named key and returns the value that
// counted.
func (o *objectEdit) remove(key string) ([]byte, bool) {
	value, present := o.get(key)
	if !present {
		return nil, false
	}
	kept := o.members[:0]
	for _, m := range o.members {
		if string(m.Key) != key {
			kept = append(kept, m)
		}
	}
	o.members, o.changed = kept, true
	return value, true
}

// add appends the member key with the string value s.
func (o *objectEdit) add(key, s string) {
	o.members = append(o.members, event.Member{Key: []byte(key), Value: event.AppendJSONString(nil, s, false)})
	o.changed = true
}

// setString makes s the value of key ("" removes it), changing nothing
// when key is named once and holds s already: a message processed twice
// keeps its bytes.
func (o *objectEdit) setString(key, s string) {
	named := 0
	for _, m := range o.members {
		if string(m.Key) == key {
			named++
		}
	}
	if cur, ok := memberString(o.members, key); named == 1 && ok && cur == s {
		return
	}
	o.remove(key)
	if s != "" {
		o.add(key, s)
	}
}

// editObject applies edit to the object at path (object keys) inside the
// object raw and returns raw's bytes with it: raw itself when the path
// leads to no object or edit changed nothing.
func editObject(raw []byte, path []string, edit func(*objectEdit)) []byte {
	members, ok := event.AppendMembers(nil, raw)
	if !ok {
		return raw
	}
	if len(path) == 0 {
		o := objectEdit{members: members}
		edit(&o)
		if !o.changed {
			return raw
		}
		return appendObject(make([]byte, 0, len(raw)+256), o.members)
	}
	i := last(members, path[0])
	if i < 0 {
		return raw
	}
	inner := members[i].Value
	edited := editObject(inner, path[1:], edit)
	if len(edited) == len(inner) && &edited[0] == &inner[0] {
		return raw
	}
	members[i].Value = edited
	return appendObject(make([]byte, 0, len(raw)+len(edited)-len(inner)), members)
}

// appendObject appends the object of members, compact.
func appendObject(dst []byte, members []event.Member) []byte {
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = event.AppendJSONString(dst, string(m.Key), false)
		dst = append(append(dst, ':'), m.Value...)
	}
	return append(dst, '}')
}

// jsonType names the type of the JSON value raw.
func jsonType(raw []byte) string {
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case '"':
		return "string"
	}
	return "number"
}
