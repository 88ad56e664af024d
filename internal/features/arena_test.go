package features

import (
	"reflect"
	"testing"

	"github.com/speculapro/speculapro/internal/event"
)

// TestArenaElementsHoldNoPointers guards decodeBufs.build: it carves a
// decoded state's arrays from a []uint64, which the collector scans for no
// pointers, so a pointer added to one of these types would be freed under
// the state's feet.
func TestArenaElementsHoldNoPointers(t *testing.T) {
	for _, typ := range []reflect.Type{
		reflect.TypeFor[bucket](), reflect.TypeFor[cell](), reflect.TypeFor[event.UUID](),
		reflect.TypeFor[int64](), reflect.TypeFor[uint64](),
	} {
		if p := pointerIn(typ); p != "" {
			t.Errorf("%s holds a pointer (%s): it cannot live in a decoded state's arena", typ, p)
		}
		if typ.Align() > 8 {
			t.Errorf("%s needs %d-byte alignment; the arena's words give 8", typ, typ.Align())
		}
	}
}

// pointerIn names a part of t that is or holds a pointer, "" if none.
func pointerIn(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	case reflect.Array:
		return pointerIn(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if p := pointerIn(t.Field(i).Type); p != "" {
				return t.Field(i).Name + ": " + p
			}
		}
		return ""
	default:
		return t.Kind().String()
	}
}
