package features

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/speculapro/speculapro/internal/event"
)

// A decoded state's arrays are carved from one arena (decodeBufs.build).
// Once the cache lets a state go (evicts it, drops it for a lost write, or
// replaces it), nothing reads that state again (cache.go: a state in the
// ring belongs to the cache, and a batch never reads its entities' states
// after publishing them), so its arena is handed to the next decode
// instead of left to the collector. At 1,000,000 events through the stream
// fresh arenas would be a fifth of every byte it allocates (2.7 of 13 GB),
// nearly all of them states the 128 MiB cache evicts a batch or two later.
//
// Arenas come in classes of eight steps per power of two (at most an
// eighth more than asked), so one freed by one entity fits the next of
// about its size; each class is a sync.Pool, which the collector empties,
// so arenas nobody asked for again do not stay.

const (
	// arenaMinWords is the smallest class: a state with few buckets.
	arenaMinWords = 64
	// arenaMaxBits: arenas beyond 2^arenaMaxBits words (8 MiB) are not
	// pooled (a counterparty paid by hundreds of thousands of accounts).
	arenaMaxBits = 20
	arenaSteps   = 8
)

var arenaPools [1 + (arenaMaxBits-6)*arenaSteps]sync.Pool

// arenaClass returns the pool index for an arena of n words and the words
// that class holds; ok is false for n beyond the largest class.
func arenaClass(n int) (idx, words int, ok bool) {
	if n <= arenaMinWords {
		return 0, arenaMinWords, true
	}
	b := bits.Len(uint(n - 1)) // 2^(b-1) < n <= 2^b, b >= 7
	if b > arenaMaxBits {
		return 0, 0, false
	}
	half, step := 1<<(b-1), 1<<(b-1)/arenaSteps
	k := (n - half + step - 1) / step // 1..arenaSteps
	return 1 + (b-7)*arenaSteps + k - 1, half + k*step, true
}

// arenaSlot is what a pool holds: a pointer, so that Put does not allocate.
type arenaSlot struct{ words []uint64 }

// getArena returns an arena of at least n words. Its contents are
// whatever the state before it left there: carve hands out empty slices
// and everything is appended, so none of it is ever read.
func getArena(n int) []uint64 {
	idx, words, ok := arenaClass(n)
	if !ok {
		return make([]uint64, n)
	}
	if s, _ := arenaPools[idx].Get().(*arenaSlot); s != nil {
		a := s.words
		s.words = nil
		arenaSlotPool.Put(s)
		return a
	}
	return make([]uint64, words)
}

var arenaSlotPool = sync.Pool{New: func() any { return new(arenaSlot) }}

// putArena makes a available to the next decode of about its size. The
// caller guarantees that nothing reads a's words again.
func putArena(a []uint64) {
	idx, words, ok := arenaClass(len(a))
	if !ok || words != len(a) {
		return // not one of getArena's classes
	}
	s := arenaSlotPool.Get().(*arenaSlot)
	s.words = a
	arenaPools[idx].Put(s)
}

// recycle hands st's arena to the next decode. st must never be read
// again: its arrays that still lie in the arena will hold another state's
// data.
func (st *state) recycle() {
	if st != nil && st.arena != nil {
		putArena(st.arena)
		st.arena = nil
	}
}

// decodeBufs hold a base's arrays as base reads them, until build copies
// them into the state's arena; reused across decodes (decodePool).
type decodeBufs struct {
	lv        [levels][]bucket
	sums, evs [levels][]cell
	mk        [2][]event.UUID
	mv        [2][]int64
	sk        []uint64
	sv        []int64
}

// sized is b with length n, reallocated only when too small.
func sized[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

var decodePool = sync.Pool{New: func() any { return new(decodeBufs) }}

// lend points st's arrays at b's (as base read them), which the delta
// records then grow; reclaim takes them back, grown or not, for build.
func (b *decodeBufs) lend(st *state) {
	st.lv, st.sums, st.evs = b.lv, b.sums, b.evs
	for d := range st.members {
		st.members[d].reset(b.mk[d], b.mv[d])
	}
	st.seen.reset(b.sk, b.sv)
}

func (b *decodeBufs) reclaim(st *state) {
	b.lv, b.sums, b.evs = st.lv, st.sums, st.evs
	for d := range st.members {
		b.mk[d], b.mv[d] = st.members[d].keys, st.members[d].vals
	}
	b.sk, b.sv = st.seen.keys, st.seen.vals
}

// build gives st the arrays in b, all carved from one allocation, its
// arena (state.arena), each with room for what a batch typically adds: two
// buckets and cells a level, four other sides and four events remembered.
// Nothing of st points into b afterwards. Decoded one by one, a state would
// be about 18 objects, most of the stream's live objects; the collector's
// marking costs by the object, so one arena instead of about ten makes each
// collection cheaper. None of the arrays' element types holds a pointer, so
// the arena is a []uint64, and one the cache let go of is reused
// (arena.go).
func (b *decodeBufs) build(st *state) {
	var lvCap, sumsCap, evsCap [levels]int
	n := 0
	for l := range levels {
		lvCap[l], sumsCap[l], evsCap[l] = withRoom(len(b.lv[l]), 2), withRoom(len(b.sums[l]), 2), withRoom(len(b.evs[l]), 2)
		n += words[bucket](lvCap[l]) + words[cell](sumsCap[l]) + words[cell](evsCap[l])
	}
	memberCap := [2]int{withRoom(len(b.mk[0]), 4), withRoom(len(b.mk[1]), 4)}
	seenCap := withRoom(len(b.sk), 4)
	for _, c := range memberCap {
		n += words[event.UUID](c) + words[int64](c)
	}
	n += words[uint64](seenCap) + words[int64](seenCap)
	var arena []uint64
	if n > 0 {
		arena = getArena(n)
	}
	st.arena = arena
	off := 0
	for l := range levels {
		st.lv[l] = append(carve[bucket](arena, &off, lvCap[l]), b.lv[l]...)
		st.sums[l] = append(carve[cell](arena, &off, sumsCap[l]), b.sums[l]...)
		st.evs[l] = append(carve[cell](arena, &off, evsCap[l]), b.evs[l]...)
	}
	for d, c := range memberCap {
		st.members[d].reset(append(carve[event.UUID](arena, &off, c), b.mk[d]...),
			append(carve[int64](arena, &off, c), b.mv[d]...))
	}
	st.seen.reset(append(carve[uint64](arena, &off, seenCap), b.sk...),
		append(carve[int64](arena, &off, seenCap), b.sv...))
}

// withRoom is the capacity of an array of n elements that more will join
// (room guessed); 0 for an empty one.
func withRoom(n, room int) int {
	if n == 0 {
		return 0
	}
	return n + room
}

// words is how many of the arena's 8-byte words c elements of T take.
func words[T any](c int) int {
	var z T
	return (c*int(unsafe.Sizeof(z)) + 7) / 8
}

// carve returns an empty slice of capacity c over the arena's words from
// *off, and moves *off past it; nil when c is 0. An append beyond c
// allocates elsewhere, as for any slice, so neighbours are never
// overwritten.
func carve[T any](arena []uint64, off *int, c int) []T {
	if c == 0 {
		return nil
	}
	p := unsafe.Pointer(&arena[*off])
	*off += words[T](c)
	return unsafe.Slice((*T)(p), c)[:0]
}
