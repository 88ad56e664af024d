package features

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// snapMargin is how much longer than the end of its slot a snapshot
// string lives: room for clocks of stream processes that disagree.
const snapMargin = time.Minute

// snapSlot is the span of expiry times whose snapshots share one string
// (doc.go "Replays"): fixed, not derived from the replay TTL, so a process
// with another TTL finds the snapshots another wrote.
const snapSlot = 5 * time.Minute

// restore gives every replayed event, on each entity that had counted it,
// the features its first application returned: from this batch's own
// snapshots when it was first applied in this batch, else from the
// entity's snapshot string of the event's expiry slot, all in ONE more
// pipelined round trip (GET per entity and slot). A missing snapshot
// leaves the features as they are now.
func (s *Store) restore(ctx context.Context, ents []*entity, r *run) error {
	type fetch struct {
		e   *entity
		key string
		evs []int
		cmd *redis.StringCmd
	}
	var fetches []fetch
	for _, e := range ents {
		first := len(fetches)
	next:
		for _, rp := range e.replays {
			idh := r.preps[rp.ev].idh
			for k := range e.snaps {
				if e.snaps[k].idh == idh {
					s.put(e, rp.ev, string(e.snaps[k].b), r)
					continue next
				}
			}
			key, _ := s.snapKey(e.key, rp.exp)
			for i := first; i < len(fetches); i++ {
				if fetches[i].key == key {
					fetches[i].evs = append(fetches[i].evs, rp.ev)
					continue next
				}
			}
			fetches = append(fetches, fetch{e: e, key: key, evs: []int{rp.ev}})
		}
	}
	if len(fetches) == 0 {
		return nil
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range fetches {
			fetches[i].cmd = p.Get(ctx, fetches[i].key)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("features: redis: reading the snapshots of %d replayed entities: %w", len(fetches), err)
	}
	for _, f := range fetches {
		v, err := f.cmd.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("features: redis: reading the snapshots of a %s: %w", kindName(f.e.eid.kind), err)
		}
		for _, ev := range f.evs {
			sn, ok := findSnap(v, r.preps[ev].idh)
			if !ok {
				s.missing.Add(1)
				continue
			}
			s.put(f.e, ev, sn, r)
		}
	}
	return nil
}

// appendSnaps appends e's snapshots as the records of its snapshot
// string: per event the id's 8-byte hash, the snapshot's length (uvarint)
// and the snapshot.
func appendSnaps(b []byte, snaps []snap) []byte {
	for _, sn := range snaps {
		b = binary.LittleEndian.AppendUint64(b, sn.idh)
		b = binary.AppendUvarint(b, uint64(len(sn.b)))
		b = append(b, sn.b...)
	}
	return b
}

// findSnap returns the snapshot of the event whose id hashes to idh in a
// snapshot string: its last record, as a state reset (an unreadable value)
// or an event counted again after its memory expired writes a newer one.
func findSnap(v string, idh uint64) (string, bool) {
	var found string
	ok := false
	for len(v) >= 9 {
		h := binary.LittleEndian.Uint64([]byte(v[:8]))
		n, w := uvarintString(v[8:])
		if w <= 0 || uint64(len(v)-8-w) < n {
			break // damaged: what follows cannot be framed
		}
		if h == idh {
			found, ok = v[8+w:8+w+int(n)], true
		}
		v = v[8+w+int(n):]
	}
	return found, ok
}

// uvarintString is binary.Uvarint on a string.
func uvarintString(s string) (uint64, int) {
	var x uint64
	var sh uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			return x | uint64(c)<<sh, i + 1
		}
		x |= uint64(c&0x7f) << sh
		sh += 7
	}
	return 0, 0
}

// put replaces event ev's section of e with its snapshot v.
func (s *Store) put(e *entity, ev int, v string, r *run) {
	sec, err := decodeSnap(v)
	if err != nil || sec.own == nil {
		s.missing.Add(1)
		return
	}
	s.restored.Add(1)
	switch v := r.out[ev]; e.eid.kind {
	case entityAccount:
		v.account = sec.own
	case entityCustomer:
		v.customer = sec.own
	default:
		v.cp = sec.own
	}
	if sec.readCP != nil {
		r.out[ev].cp = sec.readCP
	}
}

// snapKey is the snapshot string of the entity whose key is key for the
// events it remembers until exp (unix ms): <key>:r:<slot>, slot = exp /
// snapSlot, the same hash tag, so the CAS script writes both; and when
// that string expires (unix ms): its slot's end and snapMargin, after
// every event in it is forgotten.
func (s *Store) snapKey(key string, exp int64) (string, int64) {
	n, until := s.snapSlotOf(exp)
	return snapKeyIn(key, n), until
}

// snapSlotOf is the slot of the snapshots of events remembered until exp,
// and when its string expires (snapKey).
func (s *Store) snapSlotOf(exp int64) (n, until int64) {
	w := s.snapSlot.Milliseconds()
	n = exp / w
	return n, (n+1)*w + s.snapMargin.Milliseconds()
}

func snapKeyIn(key string, slot int64) string {
	return key + snapSuffix + strconv.FormatInt(slot, 10)
}

const snapSuffix = ":r:"

// snapKeyOf is snapKey for e, the string built once per slot for as long
// as e's cache entry lives: only the batch holding the entry uses it.
func (s *Store) snapKeyOf(e *entity, exp int64) (string, int64) {
	x := e.cx
	if x == nil {
		return s.snapKey(e.key, exp)
	}
	n, until := s.snapSlotOf(exp)
	if x.skey == "" || x.skeyN != n {
		x.skey, x.skeyN = snapKeyIn(e.key, n), n
	}
	return x.skey, until
}
