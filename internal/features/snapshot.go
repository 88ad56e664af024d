package features

import (
	"encoding/binary"
	"fmt"
)

// A snapshot is one entity's section of an event's features as its first
// application returned them, kept for the replay TTL so that a replay gets
// exactly those features again (doc.go "Replays"). It is stored in the
// entity's snapshot hash, field = the event id's 8-byte hash, written by
// the same CAS call as the state that remembers the event.
//
//	[0]   sections present (secTxn, secEvents, secCP, secReadCP)
//	then per section, in that order (varints; sums as appendAmt):
//	secTxn:    per window 1h, 24h, 7d, 30d: out count, in count (the 1h
//	           ones as they are, the others minus the previous window's);
//	           distinct payees 24h, 30d − 24h, senders 24h, 30d − 24h; a
//	           byte of "sum equals the previous window's" bits (out 24h,
//	           7d, 30d, in 24h, 7d, 30d), then the sums not flagged (out
//	           1h…30d, in 1h…30d); zigzag(seconds_since_previous) << 1 |
//	           new_counterparty
//	secEvents: per window 1h, 24h, 7d: count of types, then per type its
//	           name (a known type's index + 1, else 0, length, bytes) and
//	           count; seconds_since_sim_swap, seconds_since_profile_change
//	           (zigzag)
//	secCP / secReadCP: paid count 24h, 30d − 24h, sum 24h, sum 30d (or the
//	           "same" bit in a leading byte), distinct payers 24h, 30d − 24h
//
// secReadCP is the counterparty section of a transaction in which the
// counterparty pays in: that counterparty is only read (never written), so
// its section travels in the account's snapshot.
const (
	secTxn = 1 << iota
	secEvents
	secCP
	secReadCP
)

// knownTypes are account-event types written as one byte (index + 1).
// Only ever append: the index is stored.
var knownTypes = []string{"sign_in", "failed_otp", "sim_swap", "profile_change", "device_change",
	"password_reset", "login_failed", "new_device", "email_change", "phone_change"}

var knownTypeIndex = func() map[string]int {
	m := make(map[string]int, len(knownTypes))
	for i, t := range knownTypes {
		m[t] = i
	}
	return m
}()

// txnFeat is what a transaction's account or customer section is made of.
type txnFeat struct {
	w     [4]totals
	newcp bool
	ssp   int64
}

// evFeat is the account-event part of a customer section.
type evFeat struct {
	ev        [3]map[string]any
	sim, prof int64
}

func sameAmt(a, b amt) bool {
	if a.b == nil && b.b == nil {
		return a.n == b.n
	}
	return a.bigVal().Cmp(b.bigVal()) == 0
}

func appendTxnSnap(dst []byte, f *txnFeat) []byte {
	w := &f.w
	for i := range w {
		oc, ic := w[i].oc, w[i].ic
		if i > 0 {
			oc, ic = oc-w[i-1].oc, ic-w[i-1].ic
		}
		dst = binary.AppendVarint(dst, oc)
		dst = binary.AppendVarint(dst, ic)
	}
	dst = binary.AppendVarint(dst, w[1].dp)
	dst = binary.AppendVarint(dst, w[3].dp-w[1].dp)
	dst = binary.AppendVarint(dst, w[1].ds)
	dst = binary.AppendVarint(dst, w[3].ds-w[1].ds)
	var same byte
	for i := 1; i < 4; i++ {
		if sameAmt(w[i].os, w[i-1].os) {
			same |= 1 << (i - 1)
		}
		if sameAmt(w[i].is, w[i-1].is) {
			same |= 1 << (i + 2)
		}
	}
	dst = append(dst, same)
	for i := range w {
		if i == 0 || same&(1<<(i-1)) == 0 {
			dst = appendAmt(dst, w[i].os)
		}
	}
	for i := range w {
		if i == 0 || same&(1<<(i+2)) == 0 {
			dst = appendAmt(dst, w[i].is)
		}
	}
	z := uint64(f.ssp<<1) ^ uint64(f.ssp>>63)
	z <<= 1
	if f.newcp {
		z |= 1
	}
	return binary.AppendUvarint(dst, z)
}

func (r *reader) txnSnap(f *txnFeat) {
	w := &f.w
	for i := range w {
		w[i].oc, w[i].ic = r.varint(), r.varint()
		if i > 0 {
			w[i].oc += w[i-1].oc
			w[i].ic += w[i-1].ic
		}
	}
	w[1].dp = r.varint()
	w[3].dp = w[1].dp + r.varint()
	w[1].ds = r.varint()
	w[3].ds = w[1].ds + r.varint()
	sb := r.bytes(1)
	if r.err != nil {
		return
	}
	same := sb[0]
	for i := range w {
		if i > 0 && same&(1<<(i-1)) != 0 {
			w[i].os = w[i-1].os
		} else {
			w[i].os = r.amt()
		}
	}
	for i := range w {
		if i > 0 && same&(1<<(i+2)) != 0 {
			w[i].is = w[i-1].is
		} else {
			w[i].is = r.amt()
		}
	}
	z := r.uvarint()
	f.newcp = z&1 == 1
	z >>= 1
	f.ssp = int64(z>>1) ^ -int64(z&1)
}

func appendEvSnap(dst []byte, f *evFeat) []byte {
	for _, m := range f.ev {
		dst = binary.AppendUvarint(dst, uint64(len(m)))
		for typ, n := range m {
			if i, ok := knownTypeIndex[typ]; ok {
				dst = binary.AppendUvarint(dst, uint64(i+1))
			} else {
				dst = append(dst, 0)
				dst = binary.AppendUvarint(dst, uint64(len(typ)))
				dst = append(dst, typ...)
			}
			dst = binary.AppendVarint(dst, n.(int64))
		}
	}
	dst = binary.AppendVarint(dst, f.sim)
	return binary.AppendVarint(dst, f.prof)
}

func (r *reader) evSnap(f *evFeat) {
	for l := range f.ev {
		n := r.count(2)
		m := make(map[string]any, n)
		for range n {
			var typ string
			switch k := r.uvarint(); {
			case k == 0:
				typ = r.bytes(int(min(r.uvarint(), 1<<16)))
			case k <= uint64(len(knownTypes)):
				typ = knownTypes[k-1]
			default:
				r.fail("event type index")
			}
			m[typ] = r.varint()
		}
		f.ev[l] = m
	}
	f.sim, f.prof = r.varint(), r.varint()
}

func appendCPSnap(dst []byte, w *[4]totals) []byte {
	var same byte
	if sameAmt(w[3].os, w[1].os) {
		same = 1
	}
	dst = append(dst, same)
	dst = binary.AppendVarint(dst, w[1].oc)
	dst = binary.AppendVarint(dst, w[3].oc-w[1].oc)
	dst = appendAmt(dst, w[1].os)
	if same == 0 {
		dst = appendAmt(dst, w[3].os)
	}
	dst = binary.AppendVarint(dst, w[1].dp)
	return binary.AppendVarint(dst, w[3].dp-w[1].dp)
}

func (r *reader) cpSnap(w *[4]totals) {
	sb := r.bytes(1)
	if r.err != nil {
		return
	}
	w[1].oc = r.varint()
	w[3].oc = w[1].oc + r.varint()
	w[1].os = r.amt()
	if sb[0] == 1 {
		w[3].os = w[1].os
	} else {
		w[3].os = r.amt()
	}
	w[1].dp = r.varint()
	w[3].dp = w[1].dp + r.varint()
}

// snapSections is a decoded snapshot: its sections (nil for a section it
// does not hold).
type snapSections struct {
	own    *secVals // the entity's own section
	readCP *secVals // secReadCP
}

// decodeSnap turns a snapshot back into the sections' figures, which build
// the same maps as a first application's (values.go), so they are
// deep-equal.
func decodeSnap(v string) (snapSections, error) {
	var out snapSections
	if len(v) < 1 {
		return out, fmt.Errorf("%w: empty snapshot", errCorrupt)
	}
	r := &reader{s: v, off: 1}
	secs := v[0]
	var tf txnFeat
	var ef evFeat
	var cw [4]totals
	if secs&secTxn != 0 {
		r.txnSnap(&tf)
	}
	if secs&secEvents != 0 {
		r.evSnap(&ef)
	}
	if secs&secCP != 0 {
		r.cpSnap(&cw)
	}
	var rw [4]totals
	if secs&secReadCP != 0 {
		r.cpSnap(&rw)
	}
	if r.err == nil && r.off != len(v) {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return snapSections{}, r.err
	}
	if own := secs & (secTxn | secEvents | secCP); own != 0 {
		if own&(secTxn|secEvents) != 0 {
			// A section is a transaction's (with or without the events
			// part), an account event's, or a counterparty's.
			own &^= secCP
		}
		if own == secCP {
			tf.w = cw
		}
		out.own = &secVals{secs: own, tf: tf, ef: ef}
	}
	if secs&secReadCP != 0 {
		out.readCP = cpSec(rw)
	}
	return out, nil
}
