package pgcopyupsert

import (
	"bytes"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/speculapro/speculapro/internal/event"
)

// naturalKey is a customer's or account's key within its workspace.
type naturalKey struct {
	ws  event.UUID
	ext string
}

// placeholderSet collects the customers and accounts a batch names, once
// each, in a deterministic order.
type placeholderSet struct {
	customers map[event.UUID]naturalKey
	accounts  map[event.UUID]accountRef
	known     *knownParties
}

type accountRef struct {
	naturalKey
	customer event.UUID
}

func newPlaceholderSet(known *knownParties) *placeholderSet {
	return &placeholderSet{customers: map[event.UUID]naturalKey{}, accounts: map[event.UUID]accountRef{}, known: known}
}

// customer names a customer; one this process has seen committed is left
// out of the placeholder insert (it exists: nothing deletes parties).
func (p *placeholderSet) customer(ws event.UUID, ext string) event.UUID {
	id, known := p.known.id(partyCustomer, ws, ext)
	if known {
		return id
	}
	if _, ok := p.customers[id]; !ok {
		p.customers[id] = naturalKey{ws, ext}
	}
	return id
}

func (p *placeholderSet) account(ws event.UUID, ext string, customer event.UUID) event.UUID {
	id, known := p.known.id(partyAccount, ws, ext)
	if !known {
		p.accountOf(id, ws, ext, customer)
	}
	return id
}

// accountOf names an account, its ID already worked out and not known to
// exist (knownParties.id).
func (p *placeholderSet) accountOf(id, ws event.UUID, ext string, customer event.UUID) {
	if _, ok := p.accounts[id]; !ok {
		p.accounts[id] = accountRef{naturalKey{ws, ext}, customer}
	}
}

// partyKind says which name-based ID a party's name stands for.
type partyKind uint8

const (
	partyCustomer partyKind = iota
	partyAccount
	partyCounterparty
)

// namedParty is a party a write named: its kind, workspace and key (an
// external ID; a counterparty's de-duplication fingerprint, as the event
// has it), and its ID.
type namedParty struct {
	kind partyKind
	ws   event.UUID
	key  string
	id   event.UUID
}

// partyNameBytes is the room on the stack for a party's name (partyOf);
// a longer one costs an allocation to look up.
const partyNameBytes = 96

// knownParties are the customers, accounts and counterparties this output
// has seen exist: named by a batch that committed (created, or found
// stored). A batch's placeholder and counterparty inserts leave them out,
// so a steady stream naming the same parties costs PostgreSQL no index
// probe per row for them (the counterparties' update still runs). It maps
// each one's name to its ID, so that a known party's ID is one map lookup,
// not a SHA-1 of its name: three a row cost 8 % of the persister's CPU. It
// starts over when it reaches max, which then costs the probes and the
// hashing again, never correctness: a placeholder insert skips what is
// stored anyway. nil knows nothing.
type knownParties struct {
	mu    sync.RWMutex
	names map[partyDigest]event.UUID // partyOf -> ID
	// cps are the counterparties a committed update returned: what the
	// next batch's update could change about them is decided here instead
	// of by PostgreSQL probing every counterparty of every batch.
	cps map[event.UUID]counterpartyState
	max int
}

// counterpartyState is a stored counterparty as a committed batch's update
// returned it: last_seen_at (the column only grows, so a lower bound after
// that) and identifier_fingerprint's bytes ("" for NULL).
type counterpartyState struct {
	id       event.UUID
	lastSeen time.Time
	ifp      string
}

// counterpartySeenStep is how far behind a payment a counterparty's
// last_seen_at must be for the update to move it (updateCounterparties).
const counterpartySeenStep = 24 * time.Hour

// needsUpdate reports whether updateCounterparties could change cp, a
// counterparty of the batch, given st, what a committed update returned for
// it (ok false: nothing known). A link needs no update once the stored
// identifier fingerprint is the payment's: the account's registration links
// it then (migration 00010), and the statement that stored it linked the
// accounts registered before.
func (cp *counterpartyRow) needsUpdate(st counterpartyState, ok bool) bool {
	switch {
	case !ok:
		return true
	case cp.lastSeen.After(st.lastSeen.Add(counterpartySeenStep)):
		return true
	case cp.identityFP != nil && string(cp.identityFP) != st.ifp:
		return true
	}
	return false
}

// knownPartiesMax bounds the set: about 12 MB of heap at most (a name's
// digest and ID, and the maps' overhead).
const knownPartiesMax = 1 << 17

// partyDigest files a party in knownParties: two 64-bit hashes of its name
// (its kind, workspace and key in one byte string; a struct of the three
// hashed field by field was twice as slow) under this process's two random
// seeds. Filed by the name itself, a lookup would read the name's bytes
// from wherever the string lives, a second cache miss after the map's
// slot: with three lookups a row into some 30,000 names such a map is 15 %
// of the persister's CPU in a profile, more than SHA-1 of the name. Two names share a digest with
// probability about n²/2^129 for n names filed at once (n = 131,072:
// 10^-29, far below the chance of two names sharing a UUIDv5, which the
// IDs themselves accept), and the seeds are secret, so nobody can craft a
// pair.
type partyDigest [2]uint64

var partySeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// partyOf is the digest knownParties files the party kind names in
// workspace ws by key under; the name is built on the stack.
func partyOf(kind partyKind, ws event.UUID, key string) partyDigest {
	var stack [partyNameBytes]byte
	name := append(append(append(stack[:0], byte(kind)), ws[:]...), key...)
	return partyDigest{maphash.Bytes(partySeeds[0], name), maphash.Bytes(partySeeds[1], name)}
}

func newKnownParties(max int) *knownParties {
	return &knownParties{names: make(map[partyDigest]event.UUID), cps: make(map[event.UUID]counterpartyState), max: max}
}

// counterparty is what a committed update returned for counterparty id.
func (k *knownParties) counterparty(id event.UUID) (counterpartyState, bool) {
	if k == nil {
		return counterpartyState{}, false
	}
	k.mu.RLock()
	st, ok := k.cps[id]
	k.mu.RUnlock()
	return st, ok
}

// addCounterparties records what a batch's update returned; call it only
// after the batch committed. It starts over when full, as add does.
func (k *knownParties) addCounterparties(states []counterpartyState) {
	if k == nil || len(states) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.cps)+len(states) > k.max {
		clear(k.cps)
	}
	for _, st := range states {
		k.cps[st.id] = st
	}
}

// id is the ID of the party kind names in workspace ws by key, and whether
// it is known to exist.
func (k *knownParties) id(kind partyKind, ws event.UUID, key string) (event.UUID, bool) {
	if k != nil {
		d := partyOf(kind, ws, key) // outside the lock
		k.mu.RLock()
		id, ok := k.names[d]
		k.mu.RUnlock()
		if ok {
			return id, true
		}
	}
	switch kind {
	case partyCustomer:
		return event.CustomerID(ws, key), false
	case partyAccount:
		return event.AccountID(ws, key), false
	default:
		return event.CounterpartyID(ws, key), false
	}
}

// add records parties as existing; call it only after their transaction
// committed. It keeps digests of the names, never the names (their keys
// point into the records' bytes, which the set must not keep alive, nor
// read once they are reused).
func (k *knownParties) add(parties []namedParty) {
	if k == nil || len(parties) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.names)+len(parties) > k.max {
		clear(k.names)
	}
	for _, p := range parties {
		d := partyOf(p.kind, p.ws, p.key)
		if _, ok := k.names[d]; !ok {
			k.names[d] = p.id
		}
	}
}

// queue adds the placeholder inserts to b, customers first (accounts refer
// to them). Keys are sorted so that concurrent writers naming the same
// customers take their locks in the same order and cannot deadlock.
func (p *placeholderSet) queue(b *pgx.Batch, stats *writeStats) {
	if len(p.customers) > 0 {
		ids := sortedIDs(p.customers)
		wss, exts := make([]event.UUID, len(ids)), make([]string, len(ids))
		for i, id := range ids {
			c := p.customers[id]
			wss[i], exts[i] = c.ws, c.ext
			stats.named = append(stats.named, namedParty{partyCustomer, c.ws, c.ext, id})
		}
		b.Queue(insertCustomerPlaceholders, uuidArray(ids), uuidArray(wss), stringArray(exts)).Exec(func(tag pgconn.CommandTag) error {
			stats.customerPlaceholders += tag.RowsAffected()
			return nil
		})
	}
	if len(p.accounts) > 0 {
		ids := sortedIDs(p.accounts)
		wss, exts, custs := make([]event.UUID, len(ids)), make([]string, len(ids)), make([]event.UUID, len(ids))
		for i, id := range ids {
			a := p.accounts[id]
			wss[i], exts[i], custs[i] = a.ws, a.ext, a.customer
			stats.named = append(stats.named, namedParty{partyAccount, a.ws, a.ext, id})
		}
		b.Queue(insertAccountPlaceholders, uuidArray(ids), uuidArray(wss), stringArray(exts), uuidArray(custs)).Exec(func(tag pgconn.CommandTag) error {
			stats.accountPlaceholders += tag.RowsAffected()
			return nil
		})
	}
}

// counterpartyRow is one distinct counterparty of a batch; "" is NULL for
// its texts and nil for its bytes. Held by value in one slice a batch, its
// texts as strings: a pointer to each row and to each text cost four
// allocations per distinct counterparty.
type counterpartyRow struct {
	id                    event.UUID
	ws                    event.UUID
	key                   string // the fingerprint as the event has it (namedParty.key)
	known                 bool   // seen committed: the insert leaves it out
	fingerprint           []byte
	kind, masked, name    string
	encrypted, identityFP []byte
	firstSeen, lastSeen   time.Time
}

func sortedIDs[V any](m map[event.UUID]V) []event.UUID {
	ids := make([]event.UUID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	// bytes.Compare: converting the arrays to strings to compare them
	// allocated twice per comparison, n·log n times per batch.
	slices.SortFunc(ids, func(a, b event.UUID) int { return bytes.Compare(a[:], b[:]) })
	return ids
}

// txnScratch is what writeTransactions works in, kept from one batch to
// the next as copyBufs keeps COPY buffers: a batch's counterparty map,
// rows and fingerprint bytes were about a tenth of the bytes the output
// allocated per record.
type txnScratch struct {
	cps    map[event.UUID]int32 // counterparty ID -> index in cpRows
	cpRows []counterpartyRow
	order  []int32 // cpRows' indices in ID order
	fps    []byte  // the fingerprints' bytes (appendFingerprint)
}

// txnScratches holds one per writer and a spare.
var txnScratches = make(chan *txnScratch, 5)

func newTxnScratch() *txnScratch {
	select {
	case sc := <-txnScratches:
		return sc
	default:
		return &txnScratch{cps: map[event.UUID]int32{}}
	}
}

// release empties sc (its rows point into the records, which must not be
// kept alive) and keeps it, unless a rare huge batch grew it.
func (sc *txnScratch) release() {
	if cap(sc.cpRows) > 1<<16 {
		return
	}
	clear(sc.cps)
	clear(sc.cpRows)
	sc.cpRows, sc.fps = sc.cpRows[:0], sc.fps[:0]
	select {
	case txnScratches <- sc:
	default:
	}
}

// appendFingerprint reads a hex fingerprint onto arena and returns arena
// grown, with the fingerprint's bytes (a slice of it); anything else (a
// fingerprint written by another tool) is kept as its bytes, so it still
// de-duplicates. The bytes are those hex.DecodeString gave before (the
// stored rows' fingerprints; store_test.go holds it to that), without its
// allocation and its conversion of the string, two per fingerprint.
func appendFingerprint(arena []byte, s string) (grown, fp []byte) {
	start := len(arena)
	if len(s)%2 == 0 {
		// A table lookup per digit, invalid ones OR-ed into bad and
		// tested once, into room grown once.
		arena = slices.Grow(arena, len(s)/2)
		dst := arena[start : start+len(s)/2]
		var bad byte
		for i := range dst {
			hi, lo := hexDigit[s[2*i]], hexDigit[s[2*i+1]]
			bad |= hi | lo
			dst[i] = hi<<4 | lo
		}
		if bad&0xf0 == 0 {
			return arena[:start+len(dst)], dst[:len(dst):len(dst)]
		}
	}
	arena = append(arena, s...)
	return arena, arena[start:len(arena):len(arena)]
}

// hexDigit is each byte's value as a hex digit in either case (as
// hex.DecodeString reads them), 0xff for any other byte.
var hexDigit = func() (t [256]byte) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = byte(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			t[c] = byte(c - 'A' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()

// noteCounterparty adds e's counterparty (id, cpKnown: committed before, as
// far as this process knows) to the batch's rows once, widening its first
// and last seen times.
func (sc *txnScratch) noteCounterparty(e *event.Envelope, id event.UUID, cpKnown bool) {
	c := e.Counterparty
	if i, ok := sc.cps[id]; ok {
		cp := &sc.cpRows[i]
		if e.OccurredAt.Before(cp.firstSeen) {
			cp.firstSeen = e.OccurredAt
		}
		if e.OccurredAt.After(cp.lastSeen) {
			cp.lastSeen = e.OccurredAt
		}
		return
	}
	cp := counterpartyRow{
		id: id, ws: e.WorkspaceID, key: c.Fingerprint, known: cpKnown,
		kind: c.IdentifierKind, masked: c.IdentifierMasked, name: c.Name,
		encrypted: bytesOrNil(c.IdentifierEnc),
		firstSeen: e.OccurredAt, lastSeen: e.OccurredAt,
	}
	sc.fps, cp.fingerprint = appendFingerprint(sc.fps, c.Fingerprint)
	if c.IdentifierFP != "" {
		sc.fps, cp.identityFP = appendFingerprint(sc.fps, c.IdentifierFP)
	}
	sc.cps[id] = int32(len(sc.cpRows))
	sc.cpRows = append(sc.cpRows, cp)
}

// queueCounterparties queues, after the rows and placeholders, the insert
// of the batch's counterparties (cpRows) and the update of their last seen
// time, in id order.
func queueCounterparties(b *pgx.Batch, cpRows []counterpartyRow, sc *txnScratch, known *knownParties, stats *writeStats) {
	if len(cpRows) == 0 {
		return
	}
	// Their indices sorted, not the rows: swapping the rows by value
	// was most of the sort.
	order := sc.order[:0]
	for i := range cpRows {
		order = append(order, int32(i))
	}
	sc.order = order
	slices.SortFunc(order, func(x, y int32) int { return bytes.Compare(cpRows[x].id[:], cpRows[y].id[:]) })
	// Only those this process has not seen committed go to the insert
	// (one stored is skipped by it anyway, at an index probe each), and
	// to the update only those it could change (needsUpdate): a batch
	// naming only known, up-to-date counterparties sends neither. The
	// advisory locks of the identifier fingerprints either stores or
	// probes by come first (lockCounterpartyLinks).
	var wss, lwss []event.UUID
	var fps, ifps, lifps [][]byte
	var lasts []time.Time
	var ids, nwss []event.UUID
	var nfps, encs, nifps [][]byte
	var kinds, maskeds, names []string
	var firsts, nlasts []time.Time
	for _, k := range order {
		cp := &cpRows[k]
		update := cp.needsUpdate(known.counterparty(cp.id))
		if update {
			wss, fps, ifps, lasts = append(wss, cp.ws), append(fps, cp.fingerprint), append(ifps, cp.identityFP), append(lasts, cp.lastSeen)
		}
		if cp.identityFP != nil && (update || !cp.known) {
			lwss, lifps = append(lwss, cp.ws), append(lifps, cp.identityFP)
		}
		if cp.known {
			continue
		}
		stats.named = append(stats.named, namedParty{partyCounterparty, cp.ws, cp.key, cp.id})
		ids, nwss, nfps, encs, nifps = append(ids, cp.id), append(nwss, cp.ws), append(nfps, cp.fingerprint), append(encs, cp.encrypted), append(nifps, cp.identityFP)
		kinds, maskeds, names = append(kinds, cp.kind), append(maskeds, cp.masked), append(names, cp.name)
		firsts, nlasts = append(firsts, cp.firstSeen), append(nlasts, cp.lastSeen)
	}
	if len(lwss) > 0 {
		b.Queue(lockCounterpartyLinks, uuidArray(lwss), byteaArray(lifps))
	}
	if len(ids) > 0 {
		b.Queue(insertCounterparties, uuidArray(ids), uuidArray(nwss), byteaArray(nfps), optionalTextArray(kinds), byteaArray(encs),
			optionalTextArray(maskeds), optionalTextArray(names), byteaArray(nifps), timeArray(firsts), timeArray(nlasts)).
			Exec(func(tag pgconn.CommandTag) error {
				stats.counterpartiesCreated += tag.RowsAffected()
				return nil
			})
	}
	if len(wss) > 0 {
		b.Queue(updateCounterparties, uuidArray(wss), byteaArray(fps), byteaArray(ifps), timeArray(lasts)).
			Query(func(r pgx.Rows) error {
				var st counterpartyState
				var ifp []byte
				_, err := pgx.ForEachRow(r, []any{&st.id, &st.lastSeen, &ifp}, func() error {
					st.ifp = string(ifp)
					stats.counterparties = append(stats.counterparties, st)
					return nil
				})
				return err
			})
	}
}
