package features

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"
	"time"
	"unsafe"

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

// An arena's class holds at least what was asked and at most an eighth
// more (beyond the smallest class); the classes are in order of size, and
// the largest arenas are left out.
func TestArenaClasses(t *testing.T) {
	for _, tc := range []struct {
		n, idx, words int
		ok            bool
	}{
		{1, 0, 64, true},
		{64, 0, 64, true},
		{65, 1, 72, true},
		{72, 1, 72, true},
		{73, 2, 80, true},
		{128, 8, 128, true},
		{129, 9, 144, true},
		{1 << 20, len(arenaPools) - 1, 1 << 20, true},
		{1<<20 + 1, 0, 0, false},
	} {
		idx, words, ok := arenaClass(tc.n)
		if idx != tc.idx || words != tc.words || ok != tc.ok {
			t.Errorf("arenaClass(%d) = %d, %d, %v; want %d, %d, %v", tc.n, idx, words, ok, tc.idx, tc.words, tc.ok)
		}
	}
	lastIdx, lastWords := -1, 0
	for n := 1; n <= 1<<20; n += 1 + n/97 {
		idx, words, ok := arenaClass(n)
		if !ok || words < n || (n > arenaMinWords && words-n > n/arenaSteps) || idx >= len(arenaPools) {
			t.Fatalf("arenaClass(%d) = %d, %d, %v: not a class of about n words", n, idx, words, ok)
		}
		if idx < lastIdx || (idx == lastIdx) != (words == lastWords) {
			t.Fatalf("arenaClass(%d) = %d, %d after %d, %d: classes out of order", n, idx, words, lastIdx, lastWords)
		}
		lastIdx, lastWords = idx, words
	}
}

// An arena put back is what the next decode of about its size gets (the
// race detector's sync.Pool drops some of what is put back, so a few
// tries), and an arena of no class is never pooled.
func TestArenaIsReused(t *testing.T) {
	reused := false
	for range 20 {
		a := getArena(100)
		if len(a) != 104 {
			t.Fatalf("getArena(100) has %d words, want its class's 104", len(a))
		}
		putArena(a)
		if b := getArena(97); &b[0] == &a[0] {
			reused = true
			break
		}
	}
	if !reused {
		t.Error("an arena put back was never handed out again")
	}
	odd := make([]uint64, 100) // not a class's size: not pooled
	putArena(odd)
	for range 5 {
		if b := getArena(100); &b[0] == &odd[0] {
			t.Fatal("an arena of no class's size was handed out")
		}
	}
}

// A value's delta records are applied before the arena is sized: the
// decoded state holds every array in its arena, however much the records
// added (other sides, buckets, sums, event types, remembered events), and
// is the state a writer that applied the same events in memory holds.
func TestDecodedRecordsLiveInTheArena(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	nowMs, ttlMs := now.UnixMilli(), (30 * time.Minute).Milliseconds()
	want := newState()
	var id uint64
	apply := func(d *delta, i int) {
		id++
		at := now.Add(-time.Duration(i*37) * time.Minute).Unix()
		want.seen.set(id, nowMs+ttlMs)
		if i%5 == 4 {
			typ := []string{"otp_failed", "login_new_device", "sim_swap"}[i%3]
			want.applyEvent(at, typ)
			d.event(id, at, typ)
			return
		}
		cur := []string{"EUR", "USD"}[i%2]
		var other event.UUID
		other[0], other[1] = byte(i), byte(i>>8)
		in := i%3 == 0
		want.applyTxn(at, in, cur, int64(i)*10_000, true, &other)
		d.txn(id, at, in, cur, int64(i)*10_000, true, &other)
	}
	var d delta
	for i := range 3 {
		apply(&d, i)
	}
	want.prune(nowMs)
	v := encode(nil, 1, want)
	for rec := range 6 {
		d.reset()
		for i := range 8 {
			apply(&d, 3+rec*8+i)
		}
		want.prune(nowMs)
		v = d.appendRecord(v, nowMs, ttlMs)
		v = binary.BigEndian.AppendUint64(v, uint64(rec+2))
	}
	got, base, err := decodeBase(string(v))
	if err != nil {
		t.Fatal(err)
	}
	if base >= len(v) {
		t.Fatalf("the value has no delta records (base %d of %d bytes)", base, len(v))
	}
	if g, w := encode(nil, 9, got), encode(nil, 9, want); !bytes.Equal(g, w) {
		t.Errorf("the decoded state differs from the writer's:\n got %x\nwant %x", g, w)
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(got.arena)))
	hi := lo + uintptr(len(got.arena))*8
	inArena := func(name string, p unsafe.Pointer, n int) {
		if n == 0 {
			return
		}
		if a := uintptr(p); a < lo || a >= hi {
			t.Errorf("%s (%d elements) lives outside the state's arena", name, n)
		}
	}
	for l := range levels {
		inArena(fmt.Sprintf("level %d buckets", l), unsafe.Pointer(unsafe.SliceData(got.lv[l])), len(got.lv[l]))
		inArena(fmt.Sprintf("level %d sums", l), unsafe.Pointer(unsafe.SliceData(got.sums[l])), len(got.sums[l]))
		inArena(fmt.Sprintf("level %d event types", l), unsafe.Pointer(unsafe.SliceData(got.evs[l])), len(got.evs[l]))
	}
	for dir := range got.members {
		inArena(fmt.Sprintf("other sides %d", dir), unsafe.Pointer(unsafe.SliceData(got.members[dir].keys)), got.members[dir].len())
		inArena(fmt.Sprintf("other sides' times %d", dir), unsafe.Pointer(unsafe.SliceData(got.members[dir].vals)), got.members[dir].len())
	}
	inArena("replay memory", unsafe.Pointer(unsafe.SliceData(got.seen.keys)), got.seen.len())
	inArena("replay memory's expiries", unsafe.Pointer(unsafe.SliceData(got.seen.vals)), got.seen.len())
	if got.seen.len() != int(id) {
		t.Errorf("the state remembers %d events, want %d", got.seen.len(), id)
	}
}
