package features

import "unsafe"

// The windows' totals kept running (doc.go "Windows"): every event's
// features read each window's counts and its sums of one currency, which
// summed over the buckets would be up to 60 + 24 + 30 buckets and their
// cells per entity and event. Instead the state keeps each window's totals
// as they change: a count or sum added to a bucket inside a window is
// added to the window's total, and a head moving forward subtracts the
// buckets it leaves behind. They are derived from the buckets, never
// stored: a decoded state sums them once, the first time its features are
// read, and a state the process keeps (the cache's large entities, a
// backtest's Memory) keeps them from batch to batch.

// The windows, by index (1h, 24h, 7d, 30d): the level whose buckets they
// add up and how many of its buckets, up to the head's, they span.
var (
	winLevel = [4]int{lvMinute, lvHour, lvDay, lvDay}
	winSpan  = [4]int64{60, 24, 7, 30}
)

// running is a state's windows' totals: while ok, each window's counts and
// sums equal the sums of its buckets and cells (windowsScan).
//
// Sums are int64, added and subtracted as they come, so a total passes
// through partial sums no bucket ever held. abs bounds them all: it is the
// sum of the magnitudes of every amount added to a total since they
// started (startRunning counts each cell's), and a partial sum is at most
// twice that (each amount added once, and subtracted at most once, within
// the cell that leaves a window). While abs stays within runLimit no
// partial sum leaves int64, so every total is exact; beyond it, or with a
// cell beyond int64 (state.bigs), ok is false and the windows are summed
// over the buckets (windowsScan) until startRunning can begin again.
type running struct {
	ok  bool
	abs uint64
	c   [4]counts
	s   []runSum
}

// runLimit bounds running.abs: twice it is within int64.
const runLimit = 1<<62 - 1

// counts are a bucket's or a window's counts (bucket).
type counts struct {
	oc, ic, dp, ds int64
}

// runSum is one sum key's (string index << 1 | in) total per window.
type runSum struct {
	k uint32
	v [4]int64
}

// covers reports whether window w covers bucket n of its level, for a
// head at bucket h of that level.
func covers(w int, h, n int64) bool { return n > h-winSpan[w] }

// runCount adds d to the counts of every window covering bucket n of level
// l.
func (st *state) runCount(l int, n int64, d counts) {
	if !st.run.ok {
		return
	}
	h := st.head(l)
	for w := range st.run.c {
		if winLevel[w] == l && covers(w, h, n) {
			c := &st.run.c[w]
			c.oc += d.oc
			c.ic += d.ic
			c.dp += d.dp
			c.ds += d.ds
		}
	}
}

// runAdd adds units to sum key k of every window covering bucket n of
// level l; past runLimit it ends the running totals.
func (st *state) runAdd(l int, n int64, k uint32, units int64) {
	if !st.run.ok {
		return
	}
	if !st.run.bound(units) {
		st.run.ok = false
		return
	}
	h := st.head(l)
	var rs *runSum
	for w := range st.run.c {
		if winLevel[w] != l || !covers(w, h, n) {
			continue
		}
		if rs == nil {
			rs = st.runSumOf(k)
		}
		rs.v[w] += units
	}
}

// bound adds |v| to abs, false when that passes runLimit.
func (r *running) bound(v int64) bool {
	a := uint64(v)
	if v < 0 {
		a = -a
	}
	if a > runLimit || r.abs > runLimit-a {
		return false
	}
	r.abs += a
	return true
}

// runSumOf is sum key k's totals, added (zero) when missing.
func (st *state) runSumOf(k uint32) *runSum {
	for i := range st.run.s {
		if st.run.s[i].k == k {
			return &st.run.s[i]
		}
	}
	st.run.s = append(st.run.s, runSum{k: k})
	return &st.run.s[len(st.run.s)-1]
}

// slide moves the running totals to a head at t (later than the head):
// each window subtracts the buckets and cells it no longer covers.
func (st *state) slide(t int64) {
	for w := range st.run.c {
		l := winLevel[w]
		old, lo := st.head(l)-winSpan[w], t/granularity[l]-winSpan[w]
		if lo <= old {
			continue
		}
		bs := st.lv[l]
		if len(bs) == 0 || bs[len(bs)-1].n <= lo {
			// The window leaves every bucket: it is empty.
			st.run.c[w] = counts{}
			for i := range st.run.s {
				st.run.s[i].v[w] = 0
			}
			continue
		}
		c := &st.run.c[w]
		for i := firstAfter(bs, old); i < len(bs) && bs[i].n <= lo; i++ {
			b := &bs[i]
			c.oc -= b.oc
			c.ic -= b.ic
			c.dp -= b.dp
			c.ds -= b.ds
		}
		cs := st.sums[l]
		for i := firstCellAfter(cs, old); i < len(cs) && cs[i].n <= lo; i++ {
			// No cell is big while the totals run (setSum).
			rs := st.runSumOf(cs[i].k)
			rs.v[w] -= cs[i].v
		}
	}
}

// firstAfter is the index of the first bucket of bs (ascending) after
// bucket n, len(bs) for none.
func firstAfter(bs []bucket, n int64) int {
	lo, hi := 0, len(bs)
	for lo < hi {
		if m := int(uint(lo+hi) >> 1); bs[m].n <= n {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// firstCellAfter is firstAfter for cells (grouped by bucket, ascending).
func firstCellAfter(cs []cell, n int64) int {
	lo, hi := 0, len(cs)
	for lo < hi {
		if m := int(uint(lo+hi) >> 1); cs[m].n <= n {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// startRunning sums the windows' totals over the buckets, and keeps them
// running from now on; it returns false (and they do not run) when a cell
// is beyond int64 or the cells' magnitudes pass runLimit.
func (st *state) startRunning() bool {
	st.run = running{s: st.run.s[:0]}
	if len(st.bigs) > 0 {
		return false
	}
	for l := range levels {
		for i := range st.sums[l] {
			if !st.run.bound(st.sums[l][i].v) {
				return false
			}
		}
	}
	for w := range st.run.c {
		l := winLevel[w]
		h := st.head(l)
		bs := st.lv[l]
		c := &st.run.c[w]
		for i := len(bs) - 1; i >= 0 && covers(w, h, bs[i].n); i-- {
			b := &bs[i]
			c.oc += b.oc
			c.ic += b.ic
			c.dp += b.dp
			c.ds += b.ds
		}
		cs := st.sums[l]
		for i := len(cs) - 1; i >= 0 && covers(w, h, cs[i].n); i-- {
			st.runSumOf(cs[i].k).v[w] += cs[i].v
		}
	}
	st.run.ok = true
	return true
}

// windows returns the 1h, 24h, 7d and 30d totals in currency cur: the
// running totals (started on the first call after a decode).
func (st *state) windows(cur string) (w [4]totals) {
	if !st.run.ok && !st.startRunning() {
		return st.windowsScan(cur)
	}
	for i := range w {
		c := &st.run.c[i]
		w[i].oc, w[i].ic, w[i].dp, w[i].ds = c.oc, c.ic, c.dp, c.ds
	}
	ci := st.strIndex(cur)
	if ci < 0 {
		return w
	}
	for i := range st.run.s {
		rs := &st.run.s[i]
		if rs.k>>1 != uint32(ci) {
			continue
		}
		for j := range w {
			if rs.k&1 == 1 {
				w[j].is = amt{n: rs.v[j]}
			} else {
				w[j].os = amt{n: rs.v[j]}
			}
		}
	}
	return w
}

// runSize is the memory the running totals hold beyond the state itself.
func (st *state) runSize() int64 {
	return int64(cap(st.run.s)) * int64(unsafe.Sizeof(runSum{}))
}
