package features

import (
	"math/bits"
	"unsafe"
)

// table maps a key (an entity id, an event id's hash) to an int64 (a time).
// Most entities hold a few entries, which a linear search finds faster than
// a map and without building one on every decode; a table that grows past
// linearMax gets an index: open addressing over the positions in keys, 4
// bytes a slot at a load of at most 1/2 (8-16 bytes an entry, where a Go map
// of the same takes about 32; a search that finds nothing, most of them,
// then compares about 1.5 keys: the busy entities' replay memory and other
// sides are most of the cache's heap), with no pointer for the collector
// to follow.
type table[K comparable] struct {
	keys []K
	vals []int64
	// idx holds position+1 of each key at its hash's slot or the next free
	// one after it (0: free); nil: no index.
	idx []int32
	// scans counts the linear searches of a long table: its index is
	// built only once a few searched it, since a batch looks up a busy
	// entity's replay memory once or twice per event while building the
	// index of its few hundred entries costs a hundred such searches.
	scans int32
	// lo is at most every value while loOK: a prune whose predicate holds
	// for lo keeps everything, so decoding a busy entity's delta records
	// (each ending in a prune, as the writer did) need not scan its whole
	// replay memory per record.
	lo   int64
	loOK bool
}

const (
	linearMax = 24
	// indexAfter is how many linear searches of a table longer than
	// linearMax build its index.
	indexAfter = 16
)

func (t *table[K]) len() int { return len(t.keys) }

// size estimates the memory t holds, its keys keyBytes each, with arr
// counting its keys' and values' arrays (state.size: nothing for one in the
// state's arena).
func (t *table[K]) size(keyBytes uintptr, arr func(p unsafe.Pointer, c int, elem uintptr) int64) int64 {
	return arr(unsafe.Pointer(unsafe.SliceData(t.keys)), cap(t.keys), keyBytes) +
		arr(unsafe.Pointer(unsafe.SliceData(t.vals)), cap(t.vals), 8) + int64(cap(t.idx))*4
}

// slot is k's first slot in an index of 2^b slots. Keys are event-id
// hashes or ids derived by SHA-256: their first 8 (and next 8) bytes,
// multiplied by a Fibonacci constant, spread well.
func slot[K comparable](k K, b int) int {
	x := *(*uint64)(unsafe.Pointer(&k))
	if unsafe.Sizeof(k) >= 16 {
		x ^= *(*uint64)(unsafe.Add(unsafe.Pointer(&k), 8))
	}
	return int((x * 0x9e3779b97f4a7c15) >> (64 - b))
}

// index builds t's index for at least n keys.
func (t *table[K]) index(n int) {
	b := max(bits.Len(uint(n*3)), 4)
	t.idx = make([]int32, 1<<b)
	for i := range t.keys {
		t.insert(i, b)
	}
}

// insert puts position i in the index of 2^b slots.
func (t *table[K]) insert(i, b int) {
	mask := len(t.idx) - 1
	for h := slot(t.keys[i], b); ; h = (h + 1) & mask {
		if t.idx[h] == 0 {
			t.idx[h] = int32(i + 1)
			return
		}
	}
}

func (t *table[K]) find(k K) int {
	if t.idx != nil {
		b := bits.Len(uint(len(t.idx))) - 1
		mask := len(t.idx) - 1
		for h := slot(k, b); ; h = (h + 1) & mask {
			j := t.idx[h]
			if j == 0 {
				return -1
			}
			if t.keys[j-1] == k {
				return int(j - 1)
			}
		}
	}
	for i := range t.keys {
		if t.keys[i] == k {
			return i
		}
	}
	if len(t.keys) > linearMax {
		if t.scans++; t.scans < indexAfter {
			return -1
		}
		t.index(len(t.keys))
	}
	return -1
}

func (t *table[K]) get(k K) (int64, bool) {
	if i := t.find(k); i >= 0 {
		return t.vals[i], true
	}
	return 0, false
}

func (t *table[K]) set(k K, v int64) {
	switch {
	case len(t.keys) == 0:
		t.lo, t.loOK = v, true
	case v < t.lo:
		t.lo = v
	}
	if i := t.find(k); i >= 0 {
		t.vals[i] = v
		return
	}
	t.keys = append(t.keys, k)
	t.vals = append(t.vals, v)
	if t.idx != nil {
		if n := len(t.keys); n*2 > len(t.idx) {
			t.index(n)
		} else {
			t.insert(n-1, bits.Len(uint(len(t.idx)))-1)
		}
	}
}

// reset replaces the entries with keys and vals (a decoded table).
func (t *table[K]) reset(keys []K, vals []int64) {
	*t = table[K]{keys: keys, vals: vals}
}

// keepsAll is whether keep(ok) would keep every entry, known without a
// scan; ok must be monotone: true for a value means true for every larger one.
func (t *table[K]) keepsAll(ok func(v int64) bool) bool {
	return len(t.keys) == 0 || t.loOK && ok(t.lo)
}

// keep retains the entries for which ok is true, in order. ok must be
// monotone (see keepsAll).
func (t *table[K]) keep(ok func(v int64) bool) {
	if t.keepsAll(ok) {
		return
	}
	j := 0
	lo := int64(0)
	for i := range t.keys {
		if v := t.vals[i]; ok(v) {
			if j == 0 || v < lo {
				lo = v
			}
			t.keys[j], t.vals[j] = t.keys[i], v
			j++
		}
	}
	t.lo, t.loOK = lo, j > 0
	if j != len(t.keys) {
		t.keys, t.vals, t.idx = t.keys[:j], t.vals[:j], nil
	}
}
