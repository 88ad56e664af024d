package pgcopyupsert

import (
	"context"
	"encoding/hex"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/pgsystem"
)

// The work one batch costs, asserted without timing anything: a change that
// adds a round trip or a statement per batch, or allocations per record,
// fails here rather than as a slower benchmark nobody reruns.

// workCounter is a pgx tracer counting what the output sends: statements
// (each query, each statement of a pipelined batch, each COPY) and round trips
// (each Exec/Query, each SendBatch, each COPY, each prepare: the client waits
// once for each).
type workCounter struct {
	mu         sync.Mutex
	roundTrips int
	statements int
	copies     int
	sql        []string
}

func (w *workCounter) count(trip bool, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if trip {
		w.roundTrips++
	}
	w.statements++
	w.sql = append(w.sql, what)
}

func (w *workCounter) reset() (trips, statements, copies int, sql []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	trips, statements, copies, sql = w.roundTrips, w.statements, w.copies, w.sql
	w.roundTrips, w.statements, w.copies, w.sql = 0, 0, 0, nil
	return
}

func firstWords(sql string) string {
	f := strings.Fields(sql)
	return strings.Join(f[:min(4, len(f))], " ")
}

func (w *workCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	w.count(true, firstWords(d.SQL))
	return ctx
}
func (w *workCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (w *workCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	w.mu.Lock()
	w.roundTrips++
	w.mu.Unlock()
	return ctx
}
func (w *workCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	w.count(false, "batch: "+firstWords(d.SQL))
}
func (w *workCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (w *workCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	w.count(true, "COPY "+d.TableName.Sanitize())
	w.mu.Lock()
	w.copies++
	w.mu.Unlock()
	return ctx
}
func (w *workCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// A prepare is a round trip of its own (pgx's CopyFrom prepared one per
// COPY to learn the columns' types).
func (w *workCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	w.count(true, "PREPARE "+firstWords(d.SQL))
	return ctx
}
func (w *workCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// tracedHarness is a transactions harness whose output's pool counts its work.
func tracedHarness(t *testing.T) (*harness, *workCounter) {
	t.Helper()
	h := newHarness(t, tableTransactions)
	w := &workCounter{}
	opts := h.out.poolOpts
	opts.Tracer = w
	pool, err := pgsystem.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.out.pool.Close()
	h.out.pool = pool
	t.Cleanup(pool.Close)
	return h, w
}

// realisticBatch is n decoded transactions from `from` on, as event_decode
// hands them to the output: 1 in 3 with a counterparty (50 distinct), 200
// customers, 300 accounts.
func realisticBatch(t testing.TB, ws event.UUID, from, n int) service.MessageBatch {
	return decodedTxns(t, realisticRecords(t, ws, from, n))
}

// realisticRecords is realisticBatch as the persist pipelines hand it over:
// records not decoded yet, which the output decodes itself.
func realisticRecords(t testing.TB, ws event.UUID, from, n int) service.MessageBatch {
	return txnBatch(t, ws, from, from+n, func(e *event.Envelope) {
		k, _ := strconv.Atoi(strings.TrimPrefix(e.ExternalID, "txn-"))
		e.CustomerExternalID = "cust-" + strconv.Itoa(k%200)
		e.AccountExternalID = "acc-" + strconv.Itoa(k%300)
		if k%3 == 0 {
			fp := hex.EncodeToString(fmt.Appendf(nil, "recipient-%022d", k%50))
			e.Counterparty = &event.Counterparty{Name: "R " + strconv.Itoa(k%50), IdentifierKind: "iban",
				IdentifierEnc: "k1:AAAA", IdentifierMasked: "DE89 **** 3000", IdentifierFP: fp, Fingerprint: fp}
		}
	})
}

// The per-batch budget of a first write: BEGIN, the rows' COPY, one pipelined
// batch (customer and account placeholders, the counterparties' link locks,
// counterparties created and updated), COMMIT.
const (
	maxRoundTripsPerBatch = 4
	maxStatementsPerBatch = 9 // BEGIN, COPY, 5 batched statements, COMMIT, and one spare
)

func TestWorkPerBatchIsBounded(t *testing.T) {
	h, w := tracedHarness(t)
	const rows = 1000
	h.write(realisticBatch(t, h.ws, 100000, 10)) // the connection opened (its staging tables created)
	w.reset()
	// A cold batch (every party new) and a warm one (every party known):
	// nothing per row, nothing per party; the warm one leaves out the
	// placeholder inserts and every counterparty statement (the customers,
	// accounts and counterparties were seen committed, the counterparties'
	// last_seen_at is less than a day behind and their identifier
	// fingerprints are stored).
	coldStatements := 0
	for i, from := range []int{0, rows} {
		h.write(realisticBatch(t, h.ws, from, rows))
		trips, stmts, copies, sql := w.reset()
		if i == 0 {
			coldStatements = stmts
		} else if stmts != coldStatements-5 {
			t.Errorf("warm batch: %d statements, want the cold batch's %d without the 2 placeholder inserts and the counterparties' lock, insert and update (%s)", stmts, coldStatements, strings.Join(sql, "; "))
		}
		t.Logf("batch %d of %d rows: %d round trips, %d statements: %s", i, rows, trips, stmts, strings.Join(sql, "; "))
		if trips > maxRoundTripsPerBatch {
			t.Errorf("batch %d: %d round trips, want at most %d (%s)", i, trips, maxRoundTripsPerBatch, strings.Join(sql, "; "))
		}
		if stmts > maxStatementsPerBatch {
			t.Errorf("batch %d: %d statements, want at most %d (%s)", i, stmts, maxStatementsPerBatch, strings.Join(sql, "; "))
		}
		if copies != 1 {
			t.Errorf("batch %d: %d COPYs, want the rows in one", i, copies)
		}
	}
	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 10+2*rows {
		t.Fatalf("stored %d, want %d", n, 10+2*rows)
	}

	// A replay: the direct COPY fails on the first stored row (BEGIN, COPY,
	// ROLLBACK), then the staged write (BEGIN, COPY, one batch with the move
	// and the parties, COMMIT).
	h.write(realisticBatch(t, h.ws, 0, rows))
	trips, stmts, copies, sql := w.reset()
	t.Logf("replay: %d round trips, %d statements: %s", trips, stmts, strings.Join(sql, "; "))
	if trips > 3+maxRoundTripsPerBatch || copies != 2 {
		t.Errorf("replay: %d round trips and %d COPYs, want at most %d and 2 (%s)", trips, copies, 3+maxRoundTripsPerBatch, strings.Join(sql, "; "))
	}
}

// maxAllocsPerRecord bounds the output's allocations per record of a
// 1000-row batch, pgx's encoding and I/O included: 0.2 measured with and
// without -race, since a batch's counterparties are held by value in
// scratch kept for the next batch, and the rows are encoded as binary COPY
// here from one scratch row (pgx's CopyFrom costs some 12 a record); the
// bound leaves room for the runtime's noise, not for allocating per row
// again.
const maxAllocsPerRecord = 0.5

// maxBytesPerRecord bounds the bytes the output allocates per record of
// the same batches reaching it undecoded, decoding included: 82-104
// measured (226 with -race), since a record's counterparty is decoded into
// a slot kept with the batch's envelopes and the counterparties' map, rows,
// fingerprint bytes and envelopes are kept for the next batch (each of
// them allocated afresh adds 40 to 300 B); the bound leaves room for -race and noise
// (so it would not catch the counterparty's allocation coming back), not
// for per-batch scratch or a slice of envelopes per batch again.
const maxBytesPerRecord = 280

func TestAllocationsPerRecordAreBounded(t *testing.T) {
	h, _ := tracedHarness(t)
	const rows, runs = 1000, 3
	// Allocations counted over records decoded beforehand (the decoder's
	// own allocations differ under -race); bytes over records as the
	// persist pipelines hand them over, undecoded, decoding included.
	decoded := make([]service.MessageBatch, runs+1) // AllocsPerRun runs once more to warm up
	raw := make([]service.MessageBatch, runs+1)
	for i := range decoded {
		decoded[i] = realisticBatch(t, h.ws, i*rows, rows)
		raw[i] = realisticRecords(t, h.ws, (runs+1+i)*rows, rows)
	}
	h.write(realisticRecords(t, h.ws, 100000, 10)) // connections open, statements cached
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		h.write(decoded[next])
		next++
	})
	h.write(raw[0])
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, b := range raw[1:] {
		h.write(b)
	}
	runtime.ReadMemStats(&after)
	perRecord := allocs / rows
	bytesPerRecord := float64(after.TotalAlloc-before.TotalAlloc) / (runs * rows)
	t.Logf("%.1f allocations per decoded record (%.0f per %d-row batch), %.0f bytes per undecoded record", perRecord, allocs, rows, bytesPerRecord)
	if perRecord > maxAllocsPerRecord {
		t.Errorf("%.1f allocations per record, want at most %.1f", perRecord, maxAllocsPerRecord)
	}
	if bytesPerRecord > maxBytesPerRecord {
		t.Errorf("%.0f bytes allocated per undecoded record, want at most %d", bytesPerRecord, maxBytesPerRecord)
	}
}

func TestKnownPartiesStartOverWhenFull(t *testing.T) {
	ws := event.UUID{9}
	named := func(exts ...string) []namedParty {
		var ps []namedParty
		for _, ext := range exts {
			ps = append(ps, namedParty{partyCustomer, ws, ext, event.CustomerID(ws, ext)})
		}
		return ps
	}
	known := func(k *knownParties, ext string) bool {
		id, ok := k.id(partyCustomer, ws, ext)
		if id != event.CustomerID(ws, ext) {
			t.Fatalf("customer %q: ID %s, want %s", ext, id, event.CustomerID(ws, ext))
		}
		return ok
	}
	var none *knownParties
	none.add(named("c1"))
	if known(none, "c1") {
		t.Fatal("a nil set knows something")
	}
	k := newKnownParties(3)
	k.add(named("c1", "c2"))
	if !known(k, "c1") || known(k, "c3") {
		t.Fatal("id disagrees with add")
	}
	// The same name of another kind is another party.
	if id, ok := k.id(partyAccount, ws, "c1"); ok || id != event.AccountID(ws, "c1") {
		t.Fatalf("account c1: %s known %v, want %s unknown", id, ok, event.AccountID(ws, "c1"))
	}
	k.add(named("c3", "c4")) // 4 > max: starts over
	if known(k, "c1") || !known(k, "c4") || len(k.names) != 2 {
		t.Fatalf("after overflowing: %d names", len(k.names))
	}
	// A known party's ID is a lookup that allocates nothing (three a row:
	// its customer, account and counterparty).
	if allocs := testing.AllocsPerRun(100, func() { k.id(partyCustomer, ws, "c4") }); allocs != 0 {
		t.Errorf("looking up a known party allocated %.1f times, want 0", allocs)
	}
}

// A party is known under its own kind, workspace and key only (the set
// files a digest of all three), and the set keeps nothing of the key it was
// given: the records' bytes the key points into are reused once a batch is
// acked.
func TestKnownPartiesFileKindWorkspaceAndKey(t *testing.T) {
	ws1, ws2 := event.UUID{1}, event.UUID{2}
	buf := []byte("acc-7")
	key := unsafe.String(unsafe.SliceData(buf), len(buf)) // as the decoder hands it: into the record
	k := newKnownParties(knownPartiesMax)
	k.add([]namedParty{{partyAccount, ws1, key, event.AccountID(ws1, "acc-7")}})
	copy(buf, "xxx-x") // the record's bytes, reused
	for _, c := range []struct {
		name string
		kind partyKind
		ws   event.UUID
		key  string
		want bool
	}{
		{"the party itself", partyAccount, ws1, "acc-7", true},
		{"another workspace", partyAccount, ws2, "acc-7", false},
		{"another kind", partyCustomer, ws1, "acc-7", false},
		{"a longer key", partyAccount, ws1, "acc-70", false},
		{"a shorter key", partyAccount, ws1, "acc-", false},
		{"the reused bytes", partyAccount, ws1, "xxx-x", false},
	} {
		id, ok := k.id(c.kind, c.ws, c.key)
		if ok != c.want {
			t.Errorf("%s: known %v, want %v", c.name, ok, c.want)
		}
		var want event.UUID
		switch c.kind {
		case partyAccount:
			want = event.AccountID(c.ws, c.key)
		case partyCustomer:
			want = event.CustomerID(c.ws, c.key)
		}
		if id != want {
			t.Errorf("%s: ID %s, want %s", c.name, id, want)
		}
	}
}
