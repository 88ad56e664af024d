package features

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
	"unsafe"

	"github.com/speculapro/speculapro/internal/event"
)

// minPerWorker is the fewest entities worth a goroutine of computeAll.
const minPerWorker = 256

// computeAll computes ents, on up to GOMAXPROCS goroutines (computeEach):
// while a batch computes, the next batch waits for the entities it holds
// (cache.go), so the computing is on the critical path.
func (s *Store) computeAll(ents []*entity, r *run) {
	if s.serial {
		for _, e := range ents {
			s.compute(e, r)
		}
		return
	}
	computeEach(ents, func(e *entity) { s.compute(e, r) })
}

// computeEach runs fn on every entity of ents, on up to GOMAXPROCS
// goroutines when there are enough of them: an entity's computation
// touches only its own state and its own section of each event's Values
// (and, for a counterparty only read, its event's slot of run.reads).
func computeEach(ents []*entity, fn func(e *entity)) {
	w := min(runtime.GOMAXPROCS(0), len(ents)/minPerWorker)
	if w <= 1 {
		for _, e := range ents {
			fn(e)
		}
		return
	}
	var wg sync.WaitGroup
	for g := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(ents); i += w {
				fn(ents[i])
			}
		}()
	}
	wg.Wait()
}

// compute applies e's events to its state (the cache's, computed on in
// place, or decoded as read) and records their features and, for each
// event counted, its snapshot.
func (s *Store) compute(e *entity, r *run) {
	if (!e.hit || e.st == nil) && !e.decodeState() {
		return
	}
	nowMs, ttlMs := r.now.UnixMilli(), s.ttl.Milliseconds()
	e.changed = e.corrupt != nil
	e.snaps, e.replays, e.arena = e.snaps[:0], e.replays[:0], e.arena[:0]
	e.d.reset()
	e.applyOps(r, nowMs, ttlMs)
	if e.changed {
		s.encodeWrite(e, nowMs, ttlMs)
	}
	if s.cache.max >= 0 && e.corrupt == nil {
		s.keepFor(e)
	}
	e.base = ""
}

// decodeState gives e the state its events apply to: the value read from
// Redis, or the cache's value of it (cache.go), decoded; an empty state for
// an entity with no value, or one that did not decode (e.corrupt). It
// returns false when the cache's value did not decode: e is then read from
// Redis again (e.reread).
func (e *entity) decodeState() bool {
	// Read from Redis, or the cache's value of it (cache.go).
	v := e.base
	if e.hit {
		v = unsafe.String(unsafe.SliceData(e.cval), len(e.cval))
	}
	e.corrupt, e.st = nil, nil
	if e.exists {
		st, base, err := decodeBase(v)
		switch {
		case err != nil && e.hit:
			// The cache holds what this process encoded, so this is
			// never expected; but Redis may hold the entity intact.
			e.reread, e.cval, e.changed = true, nil, false
			e.snaps, e.replays = e.snaps[:0], e.replays[:0]
			return false
		case err != nil:
			e.corrupt = err
		case e.hit:
			// The cache's value may be encoded whole where Redis' has
			// records (keepFor): e.blen stays Redis' base.
			e.st = st
		default:
			e.st, e.blen = st, base
		}
	}
	if e.st == nil {
		e.st = newState()
	}
	return true
}

// applyOps applies e's events (its ops, in order) to its state and records,
// per event, its features in r.out and, for each event counted, its
// snapshot in e.snaps (e.replays for one counted before). It is the running
// totals' computation alone: Go on the state in memory, no Redis. Memory's
// run (r.memory) keeps no replay memory, delta record or snapshot: it
// writes nothing.
func (e *entity) applyOps(r *run, nowMs, ttlMs int64) {
	for _, o := range e.ops {
		switch o.mode {
		case modeRead:
			sv := r.out[o.ev].setSec(slotCP, secCP)
			sv.tf.w = e.st.windows(r.events[o.ev].Currency)
			if !r.memory {
				r.reads[o.ev] = appendCPSnap(r.reads[o.ev][:0], &sv.tf.w)
			}
		case modeEvent:
			e.eventOp(r, o.ev, nowMs, ttlMs)
		case modeTxn:
			e.txnOp(r, o.ev, nowMs, ttlMs)
		}
	}
}

// seen reports whether e counted event ev before (remembering it
// otherwise) and until when it remembers it; never, in Memory's run.
func (e *entity) seen(r *run, ev int, nowMs, ttlMs int64) (int64, bool) {
	if r.memory {
		return 0, false
	}
	return e.st.replay(r.preps[ev].idh, nowMs, ttlMs)
}

// snapped records event ev's snapshot, e.arena from start on (an event
// counted now), or that it was counted before; nothing in Memory's run.
func (e *entity) snapped(r *run, ev, start int, seen bool, exp int64) {
	switch {
	case r.memory:
	case seen:
		e.replays = append(e.replays, counted{ev, exp})
	default:
		e.snaps = append(e.snaps, snap{idh: r.preps[ev].idh, ev: ev, b: e.arena[start:len(e.arena):len(e.arena)]})
	}
}

// eventOp applies account event ev to e (a customer) and records its
// features.
func (e *entity) eventOp(r *run, ev int, nowMs, ttlMs int64) {
	st, env, p := e.st, r.events[ev], &r.preps[ev]
	exp, seen := e.seen(r, ev, nowMs, ttlMs)
	if !seen {
		st.applyEvent(p.at, env.Type)
		if !r.memory {
			e.d.event(p.idh, p.at, env.Type)
		}
		e.changed = true
	}
	r.replayed[ev] = seen
	sv := r.out[ev].setSec(slotCustomer, secEvents)
	st.evFeat(&sv.ef, p.at)
	start := len(e.arena)
	if !seen && !r.memory {
		e.arena = appendEvSnap(append(e.arena, secEvents), &sv.ef)
	}
	e.snapped(r, ev, start, seen, exp)
}

// txnOp applies transaction ev to e (its account, customer or the
// counterparty it pays) and records e's section of its features.
func (e *entity) txnOp(r *run, ev int, nowMs, ttlMs int64) {
	st, env, p := e.st, r.events[ev], &r.preps[ev]
	exp, seen := e.seen(r, ev, nowMs, ttlMs)
	newcp, ssp := false, int64(-1)
	if !seen {
		var member *event.UUID
		switch {
		case e.eid.kind == entityCounterparty:
			member = &p.acct
		case p.hasCP:
			member = &p.cp
		}
		newcp, ssp = st.applyTxn(p.at, p.in, env.Currency, p.units, p.sum, member)
		if !r.memory {
			e.d.txn(p.idh, p.at, p.in, env.Currency, p.units, p.sum, member)
		}
		e.changed = true
	}
	snap := !seen && !r.memory
	start := len(e.arena)
	switch e.eid.kind {
	case entityAccount:
		r.replayed[ev] = seen
		sv := r.out[ev].setSec(slotAccount, secTxn)
		st.txnFeat(&sv.tf, env.Currency, newcp, ssp)
		if snap {
			e.arena = appendTxnSnap(append(e.arena, secTxn), &sv.tf)
		}
	case entityCustomer:
		sv := r.out[ev].setSec(slotCustomer, secTxn|secEvents)
		st.txnFeat(&sv.tf, env.Currency, newcp, ssp)
		st.evFeat(&sv.ef, p.at)
		if snap {
			e.arena = appendEvSnap(appendTxnSnap(append(e.arena, secTxn|secEvents), &sv.tf), &sv.ef)
		}
	case entityCounterparty:
		sv := r.out[ev].setSec(slotCP, secCP)
		sv.tf.w = st.windows(env.Currency)
		if snap {
			e.arena = appendCPSnap(append(e.arena, secCP), &sv.tf.w)
		}
	}
	e.snapped(r, ev, start, seen, exp)
}

// encodeWrite readies what writing the changed e takes: its state pruned,
// the snapshot string its snapshots go to, a new generation, and the value
// to write (a delta record to append, or the state encoded whole).
func (s *Store) encodeWrite(e *entity, nowMs, ttlMs int64) {
	st := e.st
	st.prune(nowMs)
	if len(e.snaps) > 0 {
		// Every event counted now is remembered until nowMs + ttlMs:
		// its snapshot goes to that slot's string.
		e.skey, e.skeyAt = s.snapKeyOf(e, nowMs+ttlMs)
	}
	// Every write takes a random generation, never the one read plus
	// one: two writers that read the same value (a batch of this
	// process that read it while another held it, or another process)
	// would both write "+1", and a batch that computed on the loser's
	// published value (cache.go) would then pass its CAS against the
	// winner's. Likewise a key that expired and was created again.
	gen := rand.Uint64()
	// Append this batch's record while the records stay at most half
	// the base (delta.go); else write the whole value again.
	e.appended = false
	if e.exists && e.v3 && e.corrupt == nil && e.blen > 0 && !s.wholeValues {
		e.val = e.d.appendRecord(e.val[:0], nowMs, ttlMs)
		e.val = binary.BigEndian.AppendUint64(e.val, gen)
		if e.vlen-e.blen+len(e.val) <= e.blen/2 {
			e.appended = true
		}
	}
	if !e.appended {
		if cap(e.val) < e.vlen {
			// About the size it will be: growing from nothing copied it
			// several times over.
			e.val = make([]byte, 0, e.vlen+len(e.d.ops)+64)
		}
		e.val = encode(e.val[:0], gen, st)
	}
	e.refreshTTL = !e.appended || !e.hit || nowMs-e.ttlAt >= keyTTLRefresh.Milliseconds()
	if e.refreshTTL {
		e.ttlAt = nowMs
	}
}
