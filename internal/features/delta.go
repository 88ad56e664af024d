package features

import (
	"encoding/binary"

	"github.com/speculapro/speculapro/internal/event"
)

// A delta record is what one write added to an entity (doc.go "Value
// format"): the events it counted, in order, which a reader applies to the
// base after it, exactly as the writer did, then prunes as the writer did.
// A write appends its record instead of writing the whole value again
// while the records after the base stay at most half the base's size, so a
// busy entity's write costs what its batch added, not its whole history,
// and a value is at most 1.5 times its state; past that the whole value is
// written again.
//
//	uvarint(body length), then the body:
//	uvarint(wall-clock unix ms of the write), uvarint(replay TTL in ms),
//	uvarint(number of events), then per event:
//	  't' (a transaction): flags (1 in, 2 summed, 4 other side follows),
//	      8-byte hash of the event id, uvarint(occurred_at unix s),
//	      uvarint(len) and the currency, zigzag varint(amount in units),
//	      the other side's 16-byte id (flag 4)
//	  'e' (an account event): 8-byte hash of the event id,
//	      uvarint(occurred_at unix s), uvarint(len) and the type
const (
	opTxn   = 't'
	opEvent = 'e'

	dIn     = 1
	dSum    = 2
	dMember = 4
)

// delta collects one entity's record while its batch is applied.
type delta struct {
	n   int
	ops []byte
}

func (d *delta) reset() { d.n, d.ops = 0, d.ops[:0] }

func (d *delta) txn(idh uint64, at int64, in bool, cur string, units int64, sum bool, member *event.UUID) {
	var f byte
	if in {
		f |= dIn
	}
	if sum {
		f |= dSum
	}
	if member != nil {
		f |= dMember
	}
	b := append(d.ops, opTxn, f)
	b = binary.LittleEndian.AppendUint64(b, idh)
	b = binary.AppendUvarint(b, uint64(at))
	b = binary.AppendUvarint(b, uint64(len(cur)))
	b = append(b, cur...)
	b = binary.AppendVarint(b, units)
	if member != nil {
		b = append(b, member[:]...)
	}
	d.ops, d.n = b, d.n+1
}

func (d *delta) event(idh uint64, at int64, typ string) {
	b := append(d.ops, opEvent)
	b = binary.LittleEndian.AppendUint64(b, idh)
	b = binary.AppendUvarint(b, uint64(at))
	b = binary.AppendUvarint(b, uint64(len(typ)))
	b = append(b, typ...)
	d.ops, d.n = b, d.n+1
}

// appendRecord appends d as one record written at nowMs.
func (d *delta) appendRecord(dst []byte, nowMs, ttlMs int64) []byte {
	var hb [3 * binary.MaxVarintLen64]byte
	h := binary.AppendUvarint(hb[:0], uint64(nowMs))
	h = binary.AppendUvarint(h, uint64(ttlMs))
	h = binary.AppendUvarint(h, uint64(d.n))
	dst = binary.AppendUvarint(dst, uint64(len(h)+len(d.ops)))
	dst = append(dst, h...)
	return append(dst, d.ops...)
}

// record reads one delta record and applies it to st.
func (r *reader) record(st *state) {
	n := r.count(1)
	end := r.off + n
	nowMs := int64(min(r.uvarint(), 1<<62))
	ttlMs := int64(min(r.uvarint(), 1<<40))
	ops := r.count(11)
	for range ops {
		if r.err != nil {
			return
		}
		k := r.bytes(1)
		if r.err != nil {
			return
		}
		switch k[0] {
		case opTxn:
			f := r.bytes(1)
			h := r.bytes(8)
			if r.err != nil {
				return
			}
			at := int64(min(r.uvarint(), 1<<40))
			cur := r.bytes(int(min(r.uvarint(), 1<<16)))
			units := r.varint()
			var member *event.UUID
			if f[0]&dMember != 0 {
				var m event.UUID
				copy(m[:], r.bytes(16))
				member = &m
			}
			if r.err != nil {
				return
			}
			st.seen.set(binary.LittleEndian.Uint64([]byte(h)), nowMs+ttlMs)
			st.applyTxn(at, f[0]&dIn != 0, cur, units, f[0]&dSum != 0, member)
		case opEvent:
			h := r.bytes(8)
			if r.err != nil {
				return
			}
			at := int64(min(r.uvarint(), 1<<40))
			typ := r.bytes(int(min(r.uvarint(), 1<<16)))
			if r.err != nil {
				return
			}
			st.seen.set(binary.LittleEndian.Uint64([]byte(h)), nowMs+ttlMs)
			st.applyEvent(at, typ)
		default:
			r.fail("delta record: unknown event kind")
			return
		}
	}
	if r.err == nil && r.off != end {
		r.fail("delta record length")
		return
	}
	st.prune(nowMs)
}
