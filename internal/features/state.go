package features

import (
	"math/big"
	"sync"
	"unique"
	"unsafe"

	"github.com/speculapro/speculapro/internal/event"
)

// Levels of buckets: one per granularity. The number of buckets a level
// keeps is its longest window (doc.go "Windows").
const (
	lvMinute = iota
	lvHour
	lvDay
	levels
)

var (
	granularity = [levels]int64{60, 3600, 86400}
	kept        = [levels]int64{60, 24, 30}
)

// none marks a time that was never seen: occurred_at is never before 1970
// (event.Decode refuses it), so real times are ≥ 0.
const none = -1

// The account event types whose latest time is a feature, by index in
// state.ls.
var latestKept = map[string]int{"sim_swap": 0, "profile_change": 1}

// bucket is one minute, hour or day of an entity: its counts. Its sums
// and account-event counts are cells of its level (state.sums, state.evs).
// Neither holds a pointer, so the collector never scans a state's buckets
// and cells: a bucket with its own slices of sums and events, their
// currency and type strings, would be the largest part of the stream's
// heap (the cache's states) and of what the collector scans.
type bucket struct {
	n      int64 // unix time / granularity
	oc, ic int64 // transactions out, in (all currencies)
	// dp, ds: the other sides (counterparties, or paying accounts) whose
	// latest transaction out / in is in this bucket; summed over a window
	// they are the distinct counts.
	dp, ds int64
}

// cell is one bucket's sum of one currency and direction, or its count of
// one account-event type. A level's cells are grouped by bucket in
// ascending bucket order, each group in the order its cells were added.
type cell struct {
	n int64  // the bucket's number
	k uint32 // a sum: string index << 1 | in; an event count: string index
	// big: a sum beyond int64, held in state.bigs (v unused).
	big bool
	v   int64
}

// bigKey names a cell whose sum left int64.
type bigKey struct {
	l int
	n int64
	k uint32
}

// state is one entity's whole running totals, as kept in its Redis value
// (codec.go).
type state struct {
	mx int64 // the head: latest occurred_at (unix s) of any counted event
	lt int64 // latest transaction occurred_at
	ls [2]int64
	lv [levels][]bucket // ascending by n
	// sums and evs are each level's cells (cell); bigs the sums that left
	// int64 (nil until one does).
	sums, evs [levels][]cell
	bigs      map[bigKey]*big.Int
	// members: the other side (16-byte id) → its latest occurred_at, per
	// direction (0 out, 1 in).
	members [2]table[event.UUID]
	// seen is the replay memory: hash of the event id → wall-clock unix ms
	// until which it is remembered.
	seen table[uint64]
	// strs are the currencies and event types the cells name by index
	// (intern).
	strs []string
	// arena is the allocation a decoded state's arrays were carved from
	// (decodeBufs.build; nil: none), kept so that the cache can hand it to
	// the next decode once it lets the state go (arena.go). An array that
	// outgrew its room lives elsewhere and leaves a gap in it.
	arena []uint64
}

// intern returns s's index in st.strs, adding a copy of s (s may be a
// slice of an event's message, which a cached state would otherwise keep
// alive).
func (st *state) intern(s string) uint32 {
	for i, x := range st.strs {
		if x == s {
			return uint32(i)
		}
	}
	st.strs = append(st.strs, unique.Make(s).Value())
	return uint32(len(st.strs) - 1)
}

// strIndex is s's index in st.strs, -1 when the state names no such string.
func (st *state) strIndex(s string) int {
	for i, x := range st.strs {
		if x == s {
			return i
		}
	}
	return -1
}

// cellAt returns the cell of bucket n with key k in *cs, adding it (zero)
// at the end of its bucket's group. Cells mostly go to the newest bucket,
// so the search starts at the end.
func cellAt(cs *[]cell, n int64, k uint32) *cell {
	s := *cs
	i := len(s)
	if i > 0 && s[i-1].n > n {
		// The first cell of a later bucket, by halving.
		lo, hi := 0, i-1
		for lo < hi {
			if m := int(uint(lo+hi) >> 1); s[m].n <= n {
				lo = m + 1
			} else {
				hi = m
			}
		}
		i = lo
	}
	for j := i - 1; j >= 0 && s[j].n == n; j-- {
		if s[j].k == k {
			return &s[j]
		}
	}
	s = append(s, cell{})
	copy(s[i+1:], s[i:])
	s[i] = cell{n: n, k: k}
	*cs = s
	return &s[i]
}

// sumOf is the amount a sum cell of level l holds.
func (st *state) sumOf(l int, c *cell) amt {
	if c.big {
		return amt{b: st.bigs[bigKey{l, c.n, c.k}]}
	}
	return amt{n: c.v}
}

// addSum adds units to bucket n's sum with key k in level l.
func (st *state) addSum(l int, n int64, k uint32, units int64) {
	c := cellAt(&st.sums[l], n, k)
	if !c.big {
		if s := c.v + units; (units >= 0) == (s >= c.v) {
			c.v = s
			return
		}
	}
	a := st.sumOf(l, c)
	a.add(amt{n: units})
	st.setSum(l, c, a)
}

// setSum makes c (of level l) hold a.
func (st *state) setSum(l int, c *cell, a amt) {
	key := bigKey{l, c.n, c.k}
	if a.b == nil {
		if c.big {
			delete(st.bigs, key)
		}
		c.big, c.v = false, a.n
		return
	}
	if st.bigs == nil {
		st.bigs = map[bigKey]*big.Int{}
	}
	st.bigs[key], c.big, c.v = a.b, true, 0
}

func newState() *state {
	st := statePool.Get().(*state)
	*st = state{mx: none, lt: none, ls: [2]int64{none, none}}
	return st
}

// statePool keeps the states let go of at once (free): a batch decodes most
// of the entities it touches (the cache keeps small ones as values), and
// the struct alone is about half a kilobyte.
var statePool = sync.Pool{New: func() any { return new(state) }}

// free recycles st's arena and st itself. Nothing may read st again.
func (st *state) free() {
	st.recycle()
	*st = state{}
	statePool.Put(st)
}

// head is the head's bucket number in level l (-1 without events).
func (st *state) head(l int) int64 {
	if st.mx < 0 {
		return -1
	}
	return st.mx / granularity[l]
}

// retained: bucket n of level l is inside the level's longest window.
func (st *state) retained(l int, n int64) bool { return n > st.head(l)-kept[l] }

// within30 is whether ts is inside the 30d window.
func (st *state) within30(ts int64) bool { return ts >= 0 && ts/86400 > st.head(lvDay)-30 }

// bucketAt returns bucket n of level l, creating it in order. Events mostly
// land in the newest bucket, so the search starts at the end.
func (st *state) bucketAt(l int, n int64) *bucket {
	bs := st.lv[l]
	i := len(bs)
	if i > 0 && bs[i-1].n > n {
		// An older bucket (events come in any order of occurred_at): the
		// first at or after n, by halving.
		lo, hi := 0, i-1
		for lo < hi {
			if m := int(uint(lo+hi) >> 1); bs[m].n < n {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if bs[lo].n == n {
			return &bs[lo]
		}
		i = lo
	} else if i > 0 && bs[i-1].n == n {
		return &bs[i-1]
	}
	bs = append(bs, bucket{})
	copy(bs[i+1:], bs[i:])
	bs[i] = bucket{n: n}
	st.lv[l] = bs
	return &bs[i]
}

// advance moves the head to t when t is later.
func (st *state) advance(t int64) {
	if t > st.mx {
		st.mx = t
	}
}

// replay reports whether id is remembered (until after now) and otherwise
// remembers it until now+ttl.
func (st *state) replay(id uint64, nowMs, ttlMs int64) (int64, bool) {
	if exp, ok := st.seen.get(id); ok && exp > nowMs {
		return exp, true
	}
	st.seen.set(id, nowMs+ttlMs)
	return nowMs + ttlMs, false
}

// applyTxn counts one transaction (not a replay) at t (unix s) and returns
// new_counterparty and seconds_since_previous. member is the other side,
// nil for none; units the amount (sum false: counted, left out of the sums).
func (st *state) applyTxn(t int64, in bool, cur string, units int64, sum bool, member *event.UUID) (bool, int64) {
	st.advance(t)
	ssp := int64(-1)
	if st.within30(st.lt) {
		ssp = max(t-st.lt, 0)
	}
	if t > st.lt {
		st.lt = t
	}
	sum = sum && units != 0
	var k uint32
	if sum {
		k = st.intern(cur) << 1
		if in {
			k |= 1
		}
	}
	for l := range levels {
		n := t / granularity[l]
		if !st.retained(l, n) {
			continue
		}
		b := st.bucketAt(l, n)
		if in {
			b.ic++
		} else {
			b.oc++
		}
		if sum {
			st.addSum(l, n, k, units)
		}
	}
	if member == nil {
		return false, ssp
	}
	d := 0
	if in {
		d = 1
	}
	lo, okO := st.members[0].get(*member)
	li, okI := st.members[1].get(*member)
	newcp := !(okO && st.within30(lo)) && !(okI && st.within30(li))
	old, ok := lo, okO
	if in {
		old, ok = li, okI
	}
	if !ok || t > old {
		st.members[d].set(*member, t)
		// Each member is counted once, in the bucket of its latest
		// transaction (hour and day levels: the 24h and 30d windows).
		for l := lvHour; l <= lvDay; l++ {
			bn := t / granularity[l]
			if ok {
				bo := old / granularity[l]
				if bo == bn {
					continue
				}
				if st.retained(l, bo) {
					st.bucketAt(l, bo).distinct(in, -1)
				}
			}
			if st.retained(l, bn) {
				st.bucketAt(l, bn).distinct(in, 1)
			}
		}
	}
	return newcp, ssp
}

func (b *bucket) distinct(in bool, d int64) {
	if in {
		b.ds += d
	} else {
		b.dp += d
	}
}

// applyEvent counts one account event (not a replay) at t.
func (st *state) applyEvent(t int64, typ string) {
	st.advance(t)
	k := st.intern(typ)
	for l := range levels {
		n := t / granularity[l]
		if !st.retained(l, n) {
			continue
		}
		// The bucket exists for each cell (the value format nests cells
		// in their buckets).
		st.bucketAt(l, n)
		cellAt(&st.evs[l], n, k).v++
	}
	if i, ok := latestKept[typ]; ok && t > st.ls[i] {
		st.ls[i] = t
	}
}

// totals are one window's sums over its buckets.
type totals struct {
	oc, ic, dp, ds int64
	os, is         amt
}

func (w *totals) count(b *bucket) {
	w.oc += b.oc
	w.ic += b.ic
	w.dp += b.dp
	w.ds += b.ds
}

func (w *totals) sum(in bool, a amt) {
	if in {
		w.is.add(a)
	} else {
		w.os.add(a)
	}
}

// windows returns the 1h, 24h, 7d and 30d totals in currency cur, adding
// up the buckets inside each window (at most 60 + 24 + 30) and their sums
// of cur.
func (st *state) windows(cur string) (w [4]totals) {
	ci := st.strIndex(cur)
	for l := range levels {
		h := st.head(l)
		lo := h - kept[l]
		bs := st.lv[l]
		for i := len(bs) - 1; i >= 0 && bs[i].n > lo; i-- {
			b := &bs[i]
			switch l {
			case lvMinute:
				w[0].count(b)
			case lvHour:
				w[1].count(b)
			case lvDay:
				if b.n > h-7 {
					w[2].count(b)
				}
				w[3].count(b)
			}
		}
		if ci < 0 {
			continue
		}
		cs := st.sums[l]
		for i := len(cs) - 1; i >= 0 && cs[i].n > lo; i-- {
			c := &cs[i]
			if c.k>>1 != uint32(ci) {
				continue
			}
			in, a := c.k&1 == 1, st.sumOf(l, c)
			switch l {
			case lvMinute:
				w[0].sum(in, a)
			case lvHour:
				w[1].sum(in, a)
			case lvDay:
				if c.n > h-7 {
					w[2].sum(in, a)
				}
				w[3].sum(in, a)
			}
		}
	}
	return w
}

// eventCounts returns the account-event type counts of the 1h, 24h and 7d
// windows (only types with a count).
func (st *state) eventCounts() [3]map[string]any {
	var out [3]map[string]any
	span := [levels]int64{60, 24, 7}
	for l := range levels {
		m := map[string]any{}
		h := st.head(l)
		cs := st.evs[l]
		for i := len(cs) - 1; i >= 0 && cs[i].n > h-span[l]; i-- {
			if c := &cs[i]; c.v != 0 {
				typ := st.strs[c.k]
				n, _ := m[typ].(int64)
				m[typ] = n + c.v
			}
		}
		out[l] = m
	}
	return out
}

// since is seconds from ts to ref: -1 when ts is not in the 30d window, 0
// when it is later than ref.
func (st *state) since(ts, ref int64) int64 {
	if !st.within30(ts) {
		return -1
	}
	return max(ref-ts, 0)
}

// prune forgets what lies outside every window relative to the head, and
// remembered event ids that expired: the value stays bounded by the
// longest window and the replay TTL.
func (st *state) prune(nowMs int64) {
	var lims [levels]int64
	for l := range levels {
		lim := st.head(l) - kept[l]
		lims[l] = lim
		bs := st.lv[l]
		i := 0
		for i < len(bs) && bs[i].n <= lim {
			i++
		}
		if i > 0 {
			st.lv[l] = append(bs[:0], bs[i:]...)
		}
		st.sums[l] = pruneCells(st.sums[l], lim)
		st.evs[l] = pruneCells(st.evs[l], lim)
	}
	for k := range st.bigs {
		if k.n <= lims[k.l] {
			delete(st.bigs, k)
		}
	}
	for d := range st.members {
		st.members[d].keep(st.within30)
	}
	live := func(exp int64) bool { return exp > nowMs }
	if !st.seen.keepsAll(live) {
		st.seen.keep(live)
	}
}

// pruneCells drops the cells of buckets up to lim.
func pruneCells(cs []cell, lim int64) []cell {
	i := 0
	for i < len(cs) && cs[i].n <= lim {
		i++
	}
	if i == 0 {
		return cs
	}
	return append(cs[:0], cs[i:]...)
}

// size estimates the memory st holds (the cache's budget, cache.go): its
// buckets, other sides and replay memory with their indexes.
//
// The arena counts whole, once, while any array lies in it; one that every
// array has outgrown is handed to the next decode (arena.go) instead of
// kept.
func (st *state) size() int64 {
	n := int64(unsafe.Sizeof(*st))
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(st.arena)))
	hi := lo + uintptr(len(st.arena))*8
	inArena := false
	// arr is an array's bytes, unless it lies in the arena.
	arr := func(p unsafe.Pointer, c int, elem uintptr) int64 {
		if a := uintptr(p); c > 0 && a >= lo && a < hi {
			inArena = true
			return 0
		}
		return int64(c) * int64(elem)
	}
	for l := range levels {
		n += arr(unsafe.Pointer(unsafe.SliceData(st.lv[l])), cap(st.lv[l]), unsafe.Sizeof(bucket{})) +
			arr(unsafe.Pointer(unsafe.SliceData(st.sums[l])), cap(st.sums[l]), unsafe.Sizeof(cell{})) +
			arr(unsafe.Pointer(unsafe.SliceData(st.evs[l])), cap(st.evs[l]), unsafe.Sizeof(cell{}))
	}
	n += int64(len(st.bigs)) * 96
	for d := range st.members {
		n += st.members[d].size(unsafe.Sizeof(event.UUID{}), arr)
	}
	n += st.seen.size(8, arr)
	if inArena {
		n += int64(len(st.arena)) * 8
	} else {
		st.recycle()
	}
	return n + int64(cap(st.strs))*16
}
