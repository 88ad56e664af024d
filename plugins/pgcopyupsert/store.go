package pgcopyupsert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/speculapro/speculapro/internal/event"
)

// Tables pg_copy_upsert writes.
const (
	tableTransactions  = "transactions"
	tableAccountEvents = "account_events"
)

// Staging tables live per connection (created by the pool's AfterConnect) and
// empty themselves at every commit, so using them costs no DDL. Only a replay
// and the isolation of a bad row use them; a first write COPYs directly. Their
// columns are deliberately loose (numeric, text): a value the target column
// refuses then fails the INSERT … SELECT with the target's own error, which
// is what the row is dead-lettered with.
const (
	stagingTransactions  = "sp_persist_txn_staging"
	stagingAccountEvents = "sp_persist_event_staging"

	createStaging = `
CREATE TEMP TABLE IF NOT EXISTS ` + stagingTransactions + ` (
    id uuid, workspace_id uuid, external_id text, account_id uuid, customer_id uuid, counterparty_id uuid,
    amount numeric, currency text, direction text, kind text, status text,
    occurred_at timestamptz, received_at timestamptz, reference text, counterparty_name text, channel text,
    metadata jsonb, decision text, decision_reason text, decision_score numeric, decided_at timestamptz,
    content_hash bytea
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS ` + stagingAccountEvents + ` (
    id uuid, workspace_id uuid, external_id text, kind text, customer_id uuid, account_id uuid,
    occurred_at timestamptz, received_at timestamptz, payload jsonb, content_hash bytea
) ON COMMIT DELETE ROWS`
)

var stagingTxnColumns = []string{
	"id", "workspace_id", "external_id", "account_id", "customer_id", "counterparty_id",
	"amount", "currency", "direction", "kind", "status",
	"occurred_at", "received_at", "reference", "counterparty_name", "channel",
	"metadata", "decision", "decision_reason", "decision_score", "decided_at",
	"content_hash",
}

var stagingEventColumns = []string{
	"id", "workspace_id", "external_id", "kind", "customer_id", "account_id",
	"occurred_at", "received_at", "payload", "content_hash",
}

const (
	insertCustomerPlaceholders = `
INSERT INTO speculapro.customers (id, workspace_id, external_id, placeholder)
SELECT t.id, t.ws, t.ext, true
  FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS t(id, ws, ext)
 WHERE NOT EXISTS (SELECT FROM speculapro.customers c WHERE c.id = t.id)
 ORDER BY t.id
ON CONFLICT DO NOTHING`

	insertAccountPlaceholders = `
INSERT INTO speculapro.accounts (id, workspace_id, external_id, customer_id, placeholder)
SELECT t.id, t.ws, t.ext, t.cust, true
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[]) AS t(id, ws, ext, cust)
 WHERE NOT EXISTS (SELECT FROM speculapro.accounts a WHERE a.id = t.id)
 ORDER BY t.id
ON CONFLICT DO NOTHING`

	// A counterparty is found or created by its fingerprint. Only the
	// missing ones are inserted, and DO NOTHING takes no lock on a row that
	// already exists: an upsert (DO UPDATE … WHERE) locks every conflicting
	// row even when its WHERE is false, so concurrent batches paying the
	// same popular recipients queued behind each other's commits.
	insertCounterparties = `
INSERT INTO speculapro.counterparties
       (id, workspace_id, fingerprint, identifier_kind, identifier_encrypted, identifier_masked, name,
        identifier_fingerprint, account_id, first_seen_at, last_seen_at)
SELECT t.id, t.ws, t.fp, t.kind, t.enc, t.masked, t.name, t.ifp,
       (SELECT a.id FROM speculapro.accounts a
         WHERE a.workspace_id = t.ws AND a.number_fingerprint = t.ifp
         ORDER BY a.placeholder, a.id LIMIT 1),
       t.first_seen, t.last_seen
  FROM unnest($1::uuid[], $2::uuid[], $3::bytea[], $4::text[], $5::bytea[], $6::text[], $7::text[],
              $8::bytea[], $9::timestamptz[], $10::timestamptz[])
       AS t(id, ws, fp, kind, enc, masked, name, ifp, first_seen, last_seen)
 WHERE NOT EXISTS (SELECT FROM speculapro.counterparties c WHERE c.workspace_id = t.ws AND c.fingerprint = t.fp)
 ORDER BY t.id
ON CONFLICT (workspace_id, fingerprint) DO NOTHING`

	// lockCounterpartyLinks takes, shared and in key order, the advisory
	// lock of every identifier fingerprint the statements after it store or
	// look an account up by (migration 00010): an account registered at the
	// same time then either commits before they look (they find it) or
	// waits for this transaction and links the stored counterparty itself.
	lockCounterpartyLinks = `
SELECT count(pg_advisory_xact_lock_shared(k))
  FROM (SELECT DISTINCT speculapro.counterparty_link_key(t.ws, t.ifp) AS k
          FROM unnest($1::uuid[], $2::bytea[]) AS t(ws, ifp)
         ORDER BY 1) AS l`

	// updateCounterparties rewrites the counterparties a batch names that
	// this process does not know to be up to date (knownParties.cps): one
	// that can now be linked to a monitored account (found by the same
	// probe as the insert's), one whose last_seen_at is more than a day
	// behind (a recipient paid 500 times a day is not rewritten, nor
	// locked, 500 times), one whose stored identifier fingerprint is not
	// the payment's (stored before migration 00010, or made under an
	// earlier key). Later links are the accounts' trigger's. The rows to
	// rewrite are locked in id order, the order every writer takes, so two
	// writers cannot deadlock on them. It returns each named counterparty's
	// last_seen_at and identifier fingerprint as they are after it, which
	// the process remembers once the batch commits.
	updateCounterparties = `
WITH t AS (
    SELECT * FROM unnest($1::uuid[], $2::bytea[], $3::bytea[], $4::timestamptz[]) AS t(ws, fp, ifp, last_seen)
), u AS (
    UPDATE speculapro.counterparties AS c
       SET account_id = COALESCE(c.account_id, u.acc),
           last_seen_at = GREATEST(c.last_seen_at, u.last_seen),
           identifier_fingerprint = COALESCE(u.ifp, c.identifier_fingerprint)
      FROM (SELECT e.id, t.last_seen, t.ifp, l.acc
              FROM t
              JOIN speculapro.counterparties e ON e.workspace_id = t.ws AND e.fingerprint = t.fp
              LEFT JOIN LATERAL (SELECT a.id AS acc FROM speculapro.accounts a
                                  WHERE e.account_id IS NULL AND t.ifp IS NOT NULL
                                    AND a.workspace_id = t.ws AND a.number_fingerprint = t.ifp
                                  ORDER BY a.placeholder, a.id LIMIT 1) AS l ON true
             WHERE (e.account_id IS NULL AND l.acc IS NOT NULL)
                OR e.last_seen_at < t.last_seen - interval '24 hours'
                OR e.identifier_fingerprint IS DISTINCT FROM COALESCE(t.ifp, e.identifier_fingerprint)
             ORDER BY e.id
               FOR UPDATE OF e) AS u
     WHERE c.id = u.id
    RETURNING c.id, c.last_seen_at, c.identifier_fingerprint
)
SELECT e.id, COALESCE(u.last_seen_at, e.last_seen_at),
       CASE WHEN u.id IS NULL THEN e.identifier_fingerprint ELSE u.identifier_fingerprint END
  FROM t
  JOIN speculapro.counterparties e ON e.workspace_id = t.ws AND e.fingerprint = t.fp
  LEFT JOIN u ON u.id = e.id`

	lookupAccountCustomers = `SELECT id, customer_id FROM speculapro.accounts WHERE id = ANY($1::uuid[])`

	// The staged moves; a direct write COPYs into the table instead.
	insertTransactions = `
INSERT INTO speculapro.transactions
       (id, workspace_id, external_id, account_id, customer_id, counterparty_id, amount, currency, direction,
        kind, status, occurred_at, received_at, reference, counterparty_name, channel, metadata,
        decision, decision_reason, decision_score, decided_at, content_hash)
SELECT id, workspace_id, external_id, account_id, customer_id, counterparty_id, amount, currency, direction,
       kind, status, occurred_at, COALESCE(received_at, now()), reference, counterparty_name, channel,
       COALESCE(metadata, '{}'), decision, decision_reason, decision_score, decided_at, content_hash
  FROM ` + stagingTransactions + `
ON CONFLICT (id, occurred_at) DO NOTHING`

	// decideStoredTransactions gives a stored transaction without a
	// decision the decision a replayed copy of it carries: a transaction
	// sent through the ingest API and then decided arrives a second time,
	// with its decision, and the insert above skips it. A transaction that
	// has a decision keeps it, as its decisions row keeps the first
	// (insertDecisionsAndWebhooks), so the two always agree. Only a staged
	// write of decided rows runs it: a first delivery COPYs directly, and
	// a decided row it inserts has its decision already. The rows are
	// locked in ID order, every writer's order.
	decideStoredTransactions = `
WITH s AS (
    SELECT id, workspace_id, occurred_at, decision, decision_reason, decision_score, decided_at
      FROM ` + stagingTransactions + `
     WHERE decision IS NOT NULL
), l AS (
    SELECT t.id, t.occurred_at, s.decision, s.decision_reason, s.decision_score, s.decided_at
      FROM speculapro.transactions t
      JOIN s ON t.id = s.id AND t.occurred_at = s.occurred_at AND t.workspace_id = s.workspace_id
     WHERE t.decision IS NULL
     ORDER BY t.id
       FOR UPDATE OF t
)
UPDATE speculapro.transactions AS t
   SET decision = l.decision, decision_reason = l.decision_reason, decision_score = l.decision_score,
       decided_at = l.decided_at
  FROM l
 WHERE t.id = l.id AND t.occurred_at = l.occurred_at AND t.decision IS NULL`

	insertAccountEvents = `
INSERT INTO speculapro.account_events
       (id, workspace_id, external_id, kind, customer_id, account_id, occurred_at, received_at, payload,
        content_hash)
SELECT id, workspace_id, external_id, kind, customer_id, account_id, occurred_at,
       COALESCE(received_at, now()), COALESCE(payload, '{}'), content_hash
  FROM ` + stagingAccountEvents + `
ON CONFLICT (id, occurred_at) DO NOTHING`
)

// writeStats is what one write did.
type writeStats struct {
	stored                int64 // rows inserted into the table
	skipped               int64 // rows already stored (a replay)
	customerPlaceholders  int64
	accountPlaceholders   int64
	counterpartiesCreated int64
	// The customers, accounts and counterparties the write's inserts
	// named, known to exist once it commits; add leaves them out, so a
	// write put together from several (isolating) names none.
	named []namedParty
	// The counterparties the update named, as they stand once the write
	// commits (knownParties.addCounterparties); none from an isolating write.
	counterparties []counterpartyState
}

func (s *writeStats) add(o writeStats) {
	s.stored += o.stored
	s.skipped += o.skipped
	s.customerPlaceholders += o.customerPlaceholders
	s.accountPlaceholders += o.accountPlaceholders
	s.counterpartiesCreated += o.counterpartiesCreated
}

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

func textOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// jsonOrEmpty is raw, or the empty object the jsonb columns default to.
func jsonOrEmpty(raw []byte) []byte {
	if len(raw) == 0 {
		return emptyJSON
	}
	return raw
}

var emptyJSON = []byte("{}")

// writeTransactions stores rows (already de-duplicated by ID) in tx, moving
// them as mode says. A direct write falls back to staged when a row lacks
// received_at, which the table then defaults to the transaction's time.
func writeTransactions(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, mode writeMode, known *knownParties) (writeStats, error) {
	var stats writeStats
	ph := newPlaceholderSet(known)

	// A transaction that does not name its customer belongs to its
	// account's. The account may already be stored (one lookup); if not, its
	// placeholder gets a placeholder customer named after the account.
	var orphans []event.UUID
	for _, e := range rows {
		if e.CustomerExternalID == "" {
			orphans = append(orphans, event.AccountID(e.WorkspaceID, e.AccountExternalID))
		}
	}
	owner := map[event.UUID]event.UUID{}
	if len(orphans) > 0 {
		r, err := tx.Query(ctx, lookupAccountCustomers, orphans)
		if err != nil {
			return stats, fmt.Errorf("looking up the customers of %d accounts: %w", len(orphans), err)
		}
		var acc, cust event.UUID
		_, err = pgx.ForEachRow(r, []any{&acc, &cust}, func() error { owner[acc] = cust; return nil })
		if err != nil {
			return stats, fmt.Errorf("looking up the customers of %d accounts: %w", len(orphans), err)
		}
	}

	// Keyed by ID, which is the hash of the workspace and fingerprint the
	// table is unique on: a string key of the two cost an allocation a row.
	// The map holds each one's index in cpRows; both, and the fingerprints'
	// bytes, are kept for the next batch (released once the batch is sent).
	sc := newTxnScratch()
	defer sc.release()
	cps := sc.cps
	buf := newCopyRowsBuf(len(rows))
	defer buf.release()
	allReceived := true
	for _, e := range rows {
		allReceived = allReceived && !e.ReceivedAt.IsZero()
		accountID, accountKnown := known.id(partyAccount, e.WorkspaceID, e.AccountExternalID)
		var customerID event.UUID
		switch {
		case e.CustomerExternalID != "":
			customerID = ph.customer(e.WorkspaceID, e.CustomerExternalID)
		case owner[accountID] != event.UUID{}:
			customerID = owner[accountID]
		default:
			customerID = ph.customer(e.WorkspaceID, orphanCustomerPrefix+e.AccountExternalID)
		}
		if !accountKnown {
			ph.accountOf(accountID, e.WorkspaceID, e.AccountExternalID, customerID)
		}

		row := txnRow{e: e, account: accountID, customer: customerID}
		if c := e.Counterparty; c != nil {
			if c.Fingerprint != "" {
				id, cpKnown := known.id(partyCounterparty, e.WorkspaceID, c.Fingerprint)
				row.counterparty, row.hasCounterparty = id, true
				if i, ok := cps[id]; ok {
					cp := &sc.cpRows[i]
					if e.OccurredAt.Before(cp.firstSeen) {
						cp.firstSeen = e.OccurredAt
					}
					if e.OccurredAt.After(cp.lastSeen) {
						cp.lastSeen = e.OccurredAt
					}
				} else {
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
					cps[id] = int32(len(sc.cpRows))
					sc.cpRows = append(sc.cpRows, cp)
				}
			}
		}

		if err := buf.appendTransaction(row); err != nil {
			return stats, err
		}
	}

	// The rows go in first, the parties last: inserting rows takes no lock
	// another writer waits for, while a placeholder or counterparty just
	// created is waited for by every writer naming it until this
	// transaction commits, which is then only a round trip away.
	b := &pgx.Batch{}
	if mode == writeDirect && !allReceived {
		mode = writeStaged
	}
	if err := copyRows(ctx, tx, b, mode, tableTransactions, len(rows), buf, &stats); err != nil {
		return stats, err
	}
	ph.queue(b, &stats)
	if cpRows := sc.cpRows; len(cpRows) > 0 {
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
	// Decided transactions: their decisions rows and decision.created
	// webhooks, in this same transaction (store_decisions.go), and the
	// decision on a row stored before without one.
	if queueDecisions(b, rows) && mode != writeDirect {
		b.Queue(decideStoredTransactions)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return stats, fmt.Errorf("storing %d transactions with their placeholders and counterparties: %w", len(rows), err)
	}
	stats.skipped = int64(len(rows)) - stats.stored
	return stats, nil
}

// writeMode is how a write moves its rows into the table.
type writeMode int

const (
	// writeDirect COPYs the rows straight into the table, as fast as
	// PostgreSQL loads data. It has no ON CONFLICT, so a row stored before
	// (a replay) fails it with a unique violation: the caller then writes
	// the batch again, staged, in a new transaction.
	writeDirect writeMode = iota
	// writeStaged COPYs the rows into the staging table and moves them with
	// INSERT … SELECT … ON CONFLICT DO NOTHING, skipping stored rows.
	writeStaged
	// writeStagedReuse is writeStaged in a transaction whose staging table
	// may hold rows of an earlier write (isolating a bad row), emptied first.
	writeStagedReuse
)

// codeUniqueViolation is the SQLSTATE of a key stored twice.
const codeUniqueViolation = "23505"

// copyRows COPYs n rows into the table (direct) or into its staging table
// and queues on b the INSERT … SELECT that moves them (staged), counting
// what it stored in stats.
func copyRows(ctx context.Context, tx pgx.Tx, b *pgx.Batch, mode writeMode, table string, n int, src *copyRowsBuf, stats *writeStats) error {
	staging, columns, insert := stagingTransactions, stagingTxnColumns, insertTransactions
	if table == tableAccountEvents {
		staging, columns, insert = stagingAccountEvents, stagingEventColumns, insertAccountEvents
	}
	if mode == writeStagedReuse {
		if _, err := tx.Exec(ctx, "DELETE FROM "+staging); err != nil {
			return fmt.Errorf("emptying the staging table: %w", err)
		}
	}
	if mode == writeDirect {
		copied, err := copyBinary(ctx, tx, pgx.Identifier{"speculapro", table}, columns, src)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == codeUniqueViolation {
				return fmt.Errorf("copying %d rows into %s: %w: %w", n, table, errStoredBefore, err)
			}
			return fmt.Errorf("copying %d rows into %s: %w", n, table, err)
		}
		stats.stored = copied
		return nil
	}
	if _, err := copyBinary(ctx, tx, pgx.Identifier{staging}, columns, src); err != nil {
		return fmt.Errorf("copying %d rows into staging: %w", n, err)
	}
	b.Queue(insert).Exec(func(tag pgconn.CommandTag) error {
		stats.stored = tag.RowsAffected()
		return nil
	})
	return nil
}

// orphanCustomerPrefix names the placeholder customer of an account that a
// transaction names without its customer; the account's real record, when
// it arrives, points the account at its real customer.
const orphanCustomerPrefix = "account:"

// writeAccountEvents stores rows (already de-duplicated by ID) in tx; see
// writeTransactions.
func writeAccountEvents(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, mode writeMode, known *knownParties) (writeStats, error) {
	var stats writeStats
	ph := newPlaceholderSet(known)
	buf := newCopyRowsBuf(len(rows))
	defer buf.release()
	allReceived := true
	for _, e := range rows {
		allReceived = allReceived && !e.ReceivedAt.IsZero()
		customerID := ph.customer(e.WorkspaceID, e.CustomerExternalID)
		var accountID *event.UUID
		if e.AccountExternalID != "" {
			id := ph.account(e.WorkspaceID, e.AccountExternalID, customerID)
			accountID = &id
		}
		buf.appendAccountEvent(e, customerID, accountID)
	}
	if mode == writeDirect && !allReceived {
		mode = writeStaged
	}
	b := &pgx.Batch{}
	if err := copyRows(ctx, tx, b, mode, tableAccountEvents, len(rows), buf, &stats); err != nil {
		return stats, err
	}
	ph.queue(b, &stats)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return stats, fmt.Errorf("storing %d account events with their placeholders: %w", len(rows), err)
	}
	stats.skipped = int64(len(rows)) - stats.stored
	return stats, nil
}
