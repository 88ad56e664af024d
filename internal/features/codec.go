package features

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"unique"
)

// The value of an entity's key (doc.go "Value format"):
//
//	[0:8]  generation of the write that wrote it whole, big-endian uint64
//	[8]    format version (formatVersion)
//	[9:]   the state, in varints (below), that generation again, then the
//	       delta records, each followed by the 8-byte generation of the
//	       write that appended it
//
// The value's generation, which the CAS compares, is always its last 8
// bytes, so an append is ONE APPEND of the record and its generation
// (format 2 kept the generation in front only, so an append also had to
// SETRANGE it). The copy in front only keeps byte 8 the version in every
// format: a format 2 value's first byte is random.
const (
	genLen        = 8
	formatVersion = 3
	// formatV2 (delta records, the generation in front) and formatV1
	// (before delta records) are read, never written: a value read in them
	// is written whole, in formatVersion, by its next write.
	formatV2 = 2
	formatV1 = 1
)

// genAt returns the generation of value v and the offset GETRANGE reads
// it at: its last 8 bytes (-8) in formatVersion, its first 8 (0) in the
// older formats, which only a whole write (changing them) replaces. The
// generation is a copy: a slice of v would keep the whole value as read
// (Redis's reply, up to megabytes for a busy counterparty) alive for as
// long as the batch holds the entity and, for a state the cache keeps
// unchanged, as long as the cache does, uncounted by its budget (at 1M
// events, heap profiles hold 8-14 MB of replies with the copy, the batches
// read and not yet decoded, and 10-26 MB without it).
func genAt(v string) (string, int) {
	gen, off := v[:min(genLen, len(v))], 0
	if len(v) >= 2*genLen+1 && v[genLen] == formatVersion {
		gen, off = v[len(v)-genLen:], -genLen
	}
	return strings.Clone(gen), off
}

// Field flags of a bucket.
const (
	fOC = 1 << iota
	fIC
	fDP
	fDS
	fSums
	fEvs
)

// errCorrupt is what a value that does not decode is (wrapped with why).
var errCorrupt = errors.New("unreadable running totals")

// encode appends st with generation gen. Call prune first.
func encode(dst []byte, gen uint64, st *state) []byte {
	dst = binary.BigEndian.AppendUint64(dst, gen)
	dst = append(dst, formatVersion)
	dst = binary.AppendUvarint(dst, uint64(st.mx+1))
	dst = binary.AppendUvarint(dst, uint64(st.lt+1))
	dst = binary.AppendUvarint(dst, uint64(st.ls[0]+1))
	dst = binary.AppendUvarint(dst, uint64(st.ls[1]+1))

	// String table: the currencies and event types the cells name, each
	// written once, in the order the buckets first name them (st.strs may
	// hold strings no cell names any more).
	var buf [8]int32
	remap := buf[:0]
	if len(st.strs) > len(buf) {
		remap = make([]int32, 0, len(st.strs))
	}
	for range st.strs {
		remap = append(remap, -1)
	}
	used := int32(0)
	intern := func(i uint32) {
		if remap[i] < 0 {
			remap[i] = used
			used++
		}
	}
	for l := range levels {
		forCells(st, l, func(_ *bucket, sums, evs []cell) {
			for i := range sums {
				intern(sums[i].k >> 1)
			}
			for i := range evs {
				intern(evs[i].k)
			}
		})
	}
	strs := make([]uint32, used)
	for i, j := range remap {
		if j >= 0 {
			strs[j] = uint32(i)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(strs)))
	for _, i := range strs {
		dst = binary.AppendUvarint(dst, uint64(len(st.strs[i])))
		dst = append(dst, st.strs[i]...)
	}

	for l := range levels {
		h := st.head(l)
		dst = binary.AppendUvarint(dst, uint64(len(st.lv[l])))
		forCells(st, l, func(b *bucket, sums, evs []cell) {
			dst = appendBucket(dst, st, l, h, b, sums, evs, remap)
		})
	}

	dst = appendMembersAndSeen(dst, st)
	return binary.BigEndian.AppendUint64(dst, gen)
}

// appendBucket appends bucket b of level l (head h) with its cells: sums and
// event counts, the strings they name by remap's index in the string table.
func appendBucket(dst []byte, st *state, l int, h int64, b *bucket, sums, evs []cell, remap []int32) []byte {
	dst = binary.AppendUvarint(dst, uint64(h-b.n))
	var nSums, nEvs int
	for i := range sums {
		if c := &sums[i]; c.big || c.v != 0 {
			nSums++
		}
	}
	for i := range evs {
		if evs[i].v != 0 {
			nEvs++
		}
	}
	var f byte
	for bit, v := range [4]int64{b.oc, b.ic, b.dp, b.ds} {
		if v != 0 {
			f |= 1 << bit
		}
	}
	if nSums > 0 {
		f |= fSums
	}
	if nEvs > 0 {
		f |= fEvs
	}
	dst = append(dst, f)
	for bit, v := range [4]int64{b.oc, b.ic, b.dp, b.ds} {
		if f&(1<<bit) != 0 {
			dst = binary.AppendVarint(dst, v)
		}
	}
	if nSums > 0 {
		dst = binary.AppendUvarint(dst, uint64(nSums))
		for i := range sums {
			c := &sums[i]
			if !c.big && c.v == 0 {
				continue
			}
			dst = binary.AppendUvarint(dst, uint64(remap[c.k>>1])<<1|uint64(c.k&1))
			dst = appendAmt(dst, st.sumOf(l, c))
		}
	}
	if nEvs > 0 {
		dst = binary.AppendUvarint(dst, uint64(nEvs))
		for i := range evs {
			if evs[i].v != 0 {
				dst = binary.AppendUvarint(dst, uint64(remap[evs[i].k]))
				dst = binary.AppendVarint(dst, evs[i].v)
			}
		}
	}
	return dst
}

// appendMembersAndSeen appends the distinct payees' and senders' members and
// the replay memory: the sections that follow the buckets.
func appendMembersAndSeen(dst []byte, st *state) []byte {
	for d := range st.members {
		m := &st.members[d]
		dst = binary.AppendUvarint(dst, uint64(m.len()))
		for i, id := range m.keys {
			dst = append(dst, id[:]...)
			dst = binary.AppendUvarint(dst, uint64(st.mx-m.vals[i]))
		}
	}

	seen := &st.seen
	dst = binary.AppendUvarint(dst, uint64(seen.len()))
	if seen.len() > 0 {
		base := seen.vals[0]
		for _, exp := range seen.vals {
			base = min(base, exp)
		}
		dst = binary.AppendUvarint(dst, uint64(base))
		for i, h := range seen.keys {
			dst = binary.LittleEndian.AppendUint64(dst, h)
			dst = binary.AppendUvarint(dst, uint64(seen.vals[i]-base))
		}
	}
	return dst
}

// forCells calls fn with each bucket of level l, oldest first, and its
// sum and event cells.
func forCells(st *state, l int, fn func(b *bucket, sums, evs []cell)) {
	cs, es := st.sums[l], st.evs[l]
	for i := range st.lv[l] {
		b := &st.lv[l][i]
		for len(cs) > 0 && cs[0].n < b.n {
			cs = cs[1:]
		}
		for len(es) > 0 && es[0].n < b.n {
			es = es[1:]
		}
		j := 0
		for j < len(cs) && cs[j].n == b.n {
			j++
		}
		k := 0
		for k < len(es) && es[k].n == b.n {
			k++
		}
		fn(b, cs[:j], es[:k])
		cs, es = cs[j:], es[k:]
	}
}

// appendAmt writes a sum: uvarint(zigzag(n) << 1) when |n| < 2^62, else
// uvarint(len << 2 | sign << 1 | 1) and the magnitude, big-endian.
func appendAmt(dst []byte, a amt) []byte {
	if a.b == nil && a.n >= -(1<<62) && a.n < 1<<62 {
		z := uint64(a.n<<1) ^ uint64(a.n>>63)
		return binary.AppendUvarint(dst, z<<1)
	}
	v := a.bigVal()
	mag := new(big.Int).Abs(v).Bytes()
	k := uint64(len(mag))<<2 | 1
	if v.Sign() < 0 {
		k |= 2
	}
	dst = binary.AppendUvarint(dst, k)
	return append(dst, mag...)
}

// reader decodes from the value as Redis returned it (a string: no copy).
type reader struct {
	s   string
	off int
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s at byte %d", errCorrupt, what, r.off)
	}
}

func (r *reader) uvarint() uint64 {
	var x uint64
	var shift uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		if r.off >= len(r.s) {
			r.fail("truncated")
			return 0
		}
		c := r.s[r.off]
		r.off++
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				r.fail("varint overflow")
				return 0
			}
			return x | uint64(c)<<shift
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	r.fail("varint overflow")
	return 0
}

func (r *reader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// time reads a time written as t+1 (0: none).
func (r *reader) time() int64 {
	v := r.uvarint()
	if v > 1<<40 {
		r.fail("time out of range")
		return none
	}
	return int64(v) - 1
}

// count reads a number of items of at least min bytes each: more than
// the bytes left is corrupt (no huge allocation from a bad value).
func (r *reader) count(min int) int {
	n := r.uvarint()
	if n > uint64((len(r.s)-r.off)/min) {
		r.fail("count beyond the value")
		return 0
	}
	return int(n)
}

func (r *reader) bytes(n int) string {
	if n < 0 || r.off+n > len(r.s) {
		r.fail("truncated")
		return ""
	}
	s := r.s[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) amt() amt {
	k := r.uvarint()
	if k&1 == 0 {
		z := k >> 1
		return amt{n: int64(z>>1) ^ -int64(z&1)}
	}
	n := int(k >> 2)
	if n > 64 {
		r.fail("sum too long")
		return amt{}
	}
	mag := r.bytes(n)
	v := new(big.Int).SetBytes([]byte(mag))
	if k&2 != 0 {
		v.Neg(v)
	}
	if v.IsInt64() {
		return amt{n: v.Int64()}
	}
	return amt{b: v}
}

// decode parses a value. An error wraps errCorrupt.
func decode(v string) (*state, error) {
	st, _, err := decodeBase(v)
	return st, err
}

// decodeBase parses a value and returns the length of its base (the state
// as last written whole; the delta records follow it).
func decodeBase(v string) (*state, int, error) {
	if len(v) < genLen+1 {
		return nil, 0, fmt.Errorf("%w: %d bytes", errCorrupt, len(v))
	}
	ver := v[genLen]
	if ver != formatVersion && ver != formatV2 && ver != formatV1 {
		return nil, 0, fmt.Errorf("%w: unknown format version %d", errCorrupt, v[genLen])
	}
	r := &reader{s: v, off: genLen + 1}
	bufs := decodePool.Get().(*decodeBufs)
	defer decodePool.Put(bufs)
	st, err := r.base(bufs)
	if err != nil {
		return nil, 0, err
	}
	if ver == formatVersion {
		r.bytes(genLen) // the generation again
	}
	if r.err != nil {
		return nil, 0, r.err
	}
	base := r.off
	if ver == formatV1 && r.off != len(r.s) {
		r.fail("trailing bytes")
	}
	if r.err == nil && r.off < len(r.s) {
		// The delta records are applied to the arrays still in bufs, which
		// grow there (their capacity kept for the next decode), so that
		// build sizes the arena for the state as it ends: applied to the
		// arena's arrays, every record that added a bucket, a cell or an
		// other side beyond their room copied that array elsewhere, about
		// a tenth of everything the stream allocated.
		bufs.lend(st)
		for r.err == nil && r.off < len(r.s) {
			r.record(st)
			if ver == formatVersion {
				r.bytes(genLen) // the generation of the write that appended it
			}
		}
		bufs.reclaim(st)
	}
	if r.err != nil {
		return nil, 0, r.err
	}
	bufs.build(st)
	return st, base, nil
}

// base reads the state as written whole into bufs; build then gives the
// state its arrays.
func (r *reader) base(b *decodeBufs) (*state, error) {
	st := newState()
	st.mx, st.lt, st.ls[0], st.ls[1] = r.time(), r.time(), r.time(), r.time()
	strs := make([]string, r.count(1))
	for i := range strs {
		// The canonical copy: a state may outlive the value (the cache keeps
		// states), and every state naming EUR shares one string.
		strs[i] = unique.Make(r.bytes(int(min(r.uvarint(), 1<<16)))).Value()
	}
	st.strs = strs
	str := func(i uint64) uint32 {
		if i >= uint64(len(strs)) {
			r.fail("string index")
			return 0
		}
		return uint32(i)
	}
	for l := range levels {
		h := st.head(l)
		n := r.count(2)
		bs := sized(b.lv[l], n)
		sums, evs := b.sums[l][:0], b.evs[l][:0]
		for i := range bs {
			bk := &bs[i]
			*bk = bucket{n: h - int64(min(r.uvarint(), 1<<40))}
			f := r.bytes(1)
			if r.err != nil {
				return nil, r.err
			}
			for bit, p := range [4]*int64{&bk.oc, &bk.ic, &bk.dp, &bk.ds} {
				if f[0]&(1<<bit) != 0 {
					*p = r.varint()
				}
			}
			if f[0]&fSums != 0 {
				for range r.count(2) {
					k := r.uvarint()
					c := cell{n: bk.n, k: str(k>>1)<<1 | uint32(k&1)}
					a := r.amt()
					sums = append(sums, c)
					st.setSum(l, &sums[len(sums)-1], a)
				}
			}
			if f[0]&fEvs != 0 {
				for range r.count(2) {
					k := str(r.uvarint())
					evs = append(evs, cell{n: bk.n, k: k, v: r.varint()})
				}
			}
			if r.err != nil {
				return nil, r.err
			}
			if i > 0 && bk.n <= bs[i-1].n {
				r.fail("buckets out of order")
				return nil, r.err
			}
		}
		b.lv[l], b.sums[l], b.evs[l] = bs, sums, evs
	}
	r.membersAndSeen(st, b)
	if r.err != nil {
		return nil, r.err
	}
	return st, nil
}

// membersAndSeen reads the members and the replay memory into b (the
// sections after the buckets); a failure is left in r.err.
func (r *reader) membersAndSeen(st *state, b *decodeBufs) {
	for d := range st.members {
		n := r.count(17)
		keys, vals := sized(b.mk[d], n), sized(b.mv[d], n)
		for i := range n {
			copy(keys[i][:], r.bytes(16))
			vals[i] = st.mx - int64(min(r.uvarint(), 1<<40))
		}
		b.mk[d], b.mv[d] = keys, vals
	}
	b.sk, b.sv = b.sk[:0], b.sv[:0]
	if n := r.count(9); n > 0 {
		base := int64(min(r.uvarint(), 1<<62))
		keys, vals := sized(b.sk, n), sized(b.sv, n)
		for i := range n {
			h := r.bytes(8)
			if r.err != nil {
				break
			}
			keys[i] = binary.LittleEndian.Uint64([]byte(h))
			vals[i] = base + int64(min(r.uvarint(), 1<<40))
		}
		b.sk, b.sv = keys, vals
	}
}
