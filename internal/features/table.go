package features

// table maps a key (an entity id, an event id's hash) to an int64 (a time).
// Most entities hold a few entries, which a linear search finds faster than
// a map and without building one on every decode; a table that grows past
// linearMax gets a map index.
type table[K comparable] struct {
	keys []K
	vals []int64
	idx  map[K]int32
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

// idxEntryBytes is about what a map index entry costs (a swiss table's
// slot and control byte, at its load between growths).
const idxEntryBytes = 32

// size estimates the memory t holds, its keys keyBytes each.
func (t *table[K]) size(keyBytes int64) int64 {
	n := int64(cap(t.keys))*keyBytes + int64(cap(t.vals))*8
	if t.idx != nil {
		n += int64(len(t.idx)) * idxEntryBytes
	}
	return n
}

func (t *table[K]) find(k K) int {
	if t.idx != nil {
		if i, ok := t.idx[k]; ok {
			return int(i)
		}
		return -1
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
		t.idx = make(map[K]int32, len(t.keys)*2)
		for i, x := range t.keys {
			t.idx[x] = int32(i)
		}
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
	if t.idx != nil {
		t.idx[k] = int32(len(t.keys))
	}
	t.keys = append(t.keys, k)
	t.vals = append(t.vals, v)
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
