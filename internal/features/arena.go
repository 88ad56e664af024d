package features

import (
	"math/bits"
	"sync"
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
