package features

import (
	"strings"
	"testing"
	"unsafe"
)

// TestGenerationIsACopy: the generation a batch keeps for its CAS (and the
// cache for as long as it keeps the state) must not share memory with the
// value it was read from, or it pins the whole reply, megabytes for a busy
// counterparty, which nothing counts.
func TestGenerationIsACopy(t *testing.T) {
	tail := "TAILGEN!"
	front := "FRONTGEN"
	body := strings.Repeat("x", 64)
	for _, tc := range []struct {
		name string
		v    string
		gen  string
		off  int
	}{
		{name: "format 3: the last 8 bytes", v: front + string(rune(formatVersion)) + body + tail, gen: tail, off: -genLen},
		{name: "format 2: the first 8 bytes", v: front + string(rune(formatV2)) + body + tail, gen: front, off: 0},
		{name: "format 1: the first 8 bytes", v: front + string(rune(formatV1)) + body, gen: front, off: 0},
		{name: "shorter than a generation", v: "abc", gen: "abc", off: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := strings.Clone(tc.v) // on the heap, like a reply
			gen, off := genAt(v)
			if gen != tc.gen || off != tc.off {
				t.Fatalf("genAt = %q, %d; want %q, %d", gen, off, tc.gen, tc.off)
			}
			lo := uintptr(unsafe.Pointer(unsafe.StringData(v)))
			p := uintptr(unsafe.Pointer(unsafe.StringData(gen)))
			if p >= lo && p < lo+uintptr(len(v)) {
				t.Fatalf("the generation %q points into the value it was read from (%d bytes): it keeps the value alive", gen, len(v))
			}
		})
	}
}
