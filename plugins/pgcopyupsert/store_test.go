package pgcopyupsert

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// A replayed batch first fails its direct COPY on the stored rows and is
// then written staged: nothing is stored twice, and the replay is neither
// a fault nor a retry nor a dead letter.
func TestReplayOfDirectWriteIsNoFault(t *testing.T) {
	h := newHarness(t, tableTransactions)
	h.write(txnBatch(t, h.ws, 0, 40, nil))
	h.write(txnBatch(t, h.ws, 20, 60, nil)) // half of it stored already

	if n := h.count("SELECT count(*) FROM speculapro.transactions"); n != 60 {
		t.Fatalf("%d transactions, want 60", n)
	}
	if s, k := h.m.Get("stored{transactions}"), h.m.Get("skipped{transactions}"); s != 60 || k != 20 {
		t.Errorf("counted stored=%d skipped=%d, want 60 and 20", s, k)
	}
	if f, r := h.m.Get("faults{transactions}"), h.m.Get("retries{transactions}"); f != 0 || r != 0 {
		t.Errorf("a replay counted faults=%d retries=%d, want none", f, r)
	}
	if len(h.dlq.letters) != 0 {
		t.Errorf("%d dead letters, want none", len(h.dlq.letters))
	}
	if strings.Contains(h.logs.String(), logBatchRetry) {
		t.Errorf("a replay logged %q:\n%s", logBatchRetry, h.logs.String())
	}
}

// A transaction without received_at gets the database's time, as the
// column's default promises, however the batch is written.
func TestMissingReceivedAtDefaultsToTheDatabaseTime(t *testing.T) {
	h := newHarness(t, tableTransactions)
	h.write(txnBatch(t, h.ws, 0, 5, func(e *event.Envelope) { e.ReceivedAt = time.Time{} }))
	if n := h.count("SELECT count(*) FROM speculapro.transactions WHERE received_at > now() - interval '1 hour'"); n != 5 {
		t.Errorf("%d of 5 transactions without received_at got the database's time", n)
	}
}

// last_seen_at of a counterparty moves only when it is more than a day
// behind, so a popular recipient is not rewritten on every batch.
func TestCounterpartyLastSeenMovesAtMostDaily(t *testing.T) {
	h := newHarness(t, tableTransactions)
	fp := hex.EncodeToString([]byte("corner-shop" + strings.Repeat("0", 21)))
	start := baseTime.Add(-72 * time.Hour)
	at := func(d time.Duration) func(*event.Envelope) {
		return func(e *event.Envelope) {
			e.OccurredAt = start.Add(d)
			e.Counterparty = &event.Counterparty{Name: "Corner Shop", Fingerprint: fp}
		}
	}
	lastSeen := func() time.Time {
		t.Helper()
		var ls time.Time
		if err := h.conn.QueryRow(t.Context(), "SELECT last_seen_at FROM speculapro.counterparties").Scan(&ls); err != nil {
			t.Fatal(err)
		}
		return ls
	}

	h.write(txnBatch(t, h.ws, 0, 1, at(0)))
	h.write(txnBatch(t, h.ws, 1, 2, at(time.Hour)))
	if got := lastSeen(); !got.Equal(start) {
		t.Errorf("seen again within a day: last_seen_at %s, want it left at %s", got, start)
	}
	h.write(txnBatch(t, h.ws, 2, 3, at(26*time.Hour)))
	if got, want := lastSeen(), start.Add(26*time.Hour); !got.Equal(want) {
		t.Errorf("seen again after a day: last_seen_at %s, want %s", got, want)
	}
	if n := h.count("SELECT count(*) FROM speculapro.counterparties"); n != 1 {
		t.Errorf("%d counterparties, want 1", n)
	}
}

// fingerprintBytes is how fingerprints were read into bytes before
// appendFingerprint: a hex fingerprint decoded, anything else as its bytes.
func fingerprintBytes(s string) []byte {
	if b, err := hex.DecodeString(s); err == nil {
		return b
	}
	return []byte(s)
}

// appendFingerprint stores the bytes fingerprintBytes did (the column
// de-duplicates on them: existing rows were written with those), for hex in
// either case and for what is not hex, and each one's bytes stay its own
// while the arena grows.
func TestAppendFingerprintIsFingerprintBytes(t *testing.T) {
	ins := []string{"", "00", "0128b1736af758bbaa3ff5a2adba5b822930341bb9d64d180f3fe27abed86cd3b3",
		"ABCDEF0123", "abcdeF", "abc", "zz", "0g", "v2:0011", "é1"}
	for i := range 256 {
		ins = append(ins, string([]byte{'a', byte(i)}), string([]byte{byte(i), '0'}))
	}
	var arena []byte // from empty, so it grows (moves) many times
	var got [][]byte
	for _, in := range ins {
		var fp []byte
		arena, fp = appendFingerprint(arena, in)
		got = append(got, fp)
	}
	for i, in := range ins {
		if want := fingerprintBytes(in); !bytes.Equal(got[i], want) {
			t.Errorf("appendFingerprint(%q) = %x, fingerprintBytes %x", in, got[i], want)
		}
	}
}

func TestCounterpartyNeedsUpdate(t *testing.T) {
	seen := baseTime
	stored := counterpartyState{lastSeen: seen, ifp: "\x01iban"}
	for _, tc := range []struct {
		name     string
		lastSeen time.Time
		ifp      []byte
		st       counterpartyState
		ok       bool
		want     bool
	}{
		{"nothing known: the update finds out", seen, []byte("\x01iban"), counterpartyState{}, false, true},
		{"known, seen again within the day", seen.Add(23 * time.Hour), []byte("\x01iban"), stored, true, false},
		{"known, seen again exactly a day on", seen.Add(counterpartySeenStep), []byte("\x01iban"), stored, true, false},
		{"known, seen again over a day on", seen.Add(counterpartySeenStep + time.Second), []byte("\x01iban"), stored, true, true},
		{"known, an older payment", seen.Add(-48 * time.Hour), []byte("\x01iban"), stored, true, false},
		{"identifier fingerprint under another key", seen, []byte("\x02iban"), stored, true, true},
		{"identifier fingerprint not stored yet (before migration 00010)", seen, []byte("\x01iban"), counterpartyState{lastSeen: seen}, true, true},
		{"payment without an identifier fingerprint", seen, nil, stored, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := counterpartyRow{lastSeen: tc.lastSeen, identityFP: tc.ifp}
			if got := cp.needsUpdate(tc.st, tc.ok); got != tc.want {
				t.Errorf("needsUpdate = %v, want %v", got, tc.want)
			}
		})
	}
}

// linkHarness is a transactions harness with helpers for counterparties
// and the monitored accounts they link to.
type linkHarness struct {
	*harness
	app *pgx.Conn // speculapro_app: row-level security applies, as for the ingest API
}

func newLinkHarness(t *testing.T) *linkHarness {
	h := newHarness(t, tableTransactions)
	h.exec(`INSERT INTO speculapro.customers (id, workspace_id, external_id) VALUES ($1, $2, 'c-own')`,
		event.CustomerID(h.ws, "c-own"), h.ws)
	return &linkHarness{harness: h, app: h.db.Connect(t, h.db.AppURL)}
}

// linkFP is a 32-byte fingerprint's hex, distinct per name.
func linkFP(name string) string {
	return hex.EncodeToString([]byte(name + strings.Repeat("0", 32-len(name))))
}

// pay writes one transaction to the counterparty dedupe, whose identifier
// has the fingerprint identity, with the output out.
func (h *linkHarness) pay(out *pgCopyUpsert, n int, dedupe, identity string) {
	h.t.Helper()
	b := txnBatch(h.t, h.ws, n, n+1, func(e *event.Envelope) {
		e.Counterparty = &event.Counterparty{Name: "Recipient " + dedupe, IdentifierKind: "iban",
			IdentifierEnc: "k1:AAAA", IdentifierMasked: "DE89 **** 3000", IdentifierFP: linkFP(identity), Fingerprint: linkFP(dedupe)}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := out.WriteBatch(ctx, b); err != nil {
		h.t.Fatalf("WriteBatch: %v", err)
	}
}

// register writes a monitored account whose number has the fingerprint
// identity the way the ingest API does: as speculapro_app, in the
// workspace.
func (h *linkHarness) register(ext, identity string) {
	h.t.Helper()
	if err := h.registerErr(ext, identity); err != nil {
		h.t.Fatal(err)
	}
}

// registerErr is register for another goroutine than the test's.
func (h *linkHarness) registerErr(ext, identity string) error {
	ctx := context.Background()
	tx, err := h.app.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT set_config('speculapro.workspace_id', $1, true)`, h.ws.String()); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO speculapro.accounts (id, workspace_id, external_id, customer_id, number_fingerprint)
		VALUES ($1, $2, $3, $4, decode($5, 'hex'))`,
		event.AccountID(h.ws, ext), h.ws, ext, event.CustomerID(h.ws, "c-own"), linkFP(identity)); err != nil {
		return fmt.Errorf("registering account %s: %w", ext, err)
	}
	return tx.Commit(ctx)
}

// linkedTo is the external ID of the account the counterparty dedupe is
// linked to, "" for none.
func (h *linkHarness) linkedTo(dedupe string) string {
	h.t.Helper()
	var ext *string
	if err := h.conn.QueryRow(context.Background(), `SELECT a.external_id FROM speculapro.counterparties c
		LEFT JOIN speculapro.accounts a ON a.id = c.account_id WHERE c.workspace_id = $1 AND c.fingerprint = decode($2, 'hex')`,
		h.ws, linkFP(dedupe)).Scan(&ext); err != nil {
		h.t.Fatalf("counterparty %s: %v", dedupe, err)
	}
	if ext == nil {
		return ""
	}
	return *ext
}

func TestAccountRegisteredLaterLinksItsCounterpartiesAtOnce(t *testing.T) {
	h := newLinkHarness(t)
	h.pay(h.out, 0, "landlord", "landlord-iban")
	h.pay(h.out, 1, "corner-shop", "shop-iban")
	if got := h.linkedTo("landlord"); got != "" {
		t.Fatalf("linked to %q before any account has its number", got)
	}
	// No payment after the registration: the account's own write links.
	h.register("a-landlord", "landlord-iban")
	if got := h.linkedTo("landlord"); got != "a-landlord" {
		t.Errorf("after its account was registered: linked to %q, want a-landlord", got)
	}
	if got := h.linkedTo("corner-shop"); got != "" {
		t.Errorf("another counterparty linked to %q", got)
	}
	// A second account with the same number does not take the link over.
	h.register("a-landlord-2", "landlord-iban")
	if got := h.linkedTo("landlord"); got != "a-landlord" {
		t.Errorf("after a second account with its number: linked to %q, want still a-landlord", got)
	}
	// Nor does a payment after it: the link stays the first.
	h.pay(h.out, 2, "landlord", "landlord-iban")
	if got := h.linkedTo("landlord"); got != "a-landlord" {
		t.Errorf("after another payment: linked to %q, want still a-landlord", got)
	}
}

func TestCounterpartyStoredBeforeLinkingByAccountCatchesUp(t *testing.T) {
	h := newLinkHarness(t)
	h.pay(h.out, 0, "landlord", "landlord-iban")
	// As a row stored before migration 00010: no identifier fingerprint,
	// so the account registered now cannot find it.
	h.exec(`UPDATE speculapro.counterparties SET identifier_fingerprint = NULL`)
	h.register("a-landlord", "landlord-iban")
	if got := h.linkedTo("landlord"); got != "" {
		t.Fatalf("linked to %q without a stored identifier fingerprint", got)
	}
	// The next payment, written by a process that has not updated it (one
	// started after the upgrade), stores the fingerprint and links it.
	fresh := h.newOutput(tableTransactions, h.db.SystemURL)
	h.pay(fresh, 1, "landlord", "landlord-iban")
	if got := h.linkedTo("landlord"); got != "a-landlord" {
		t.Errorf("after its next payment: linked to %q, want a-landlord", got)
	}
	if n := h.count(`SELECT count(*) FROM speculapro.counterparties WHERE identifier_fingerprint = decode($1, 'hex')`, linkFP("landlord-iban")); n != 1 {
		t.Errorf("%d counterparties store the identifier fingerprint, want 1", n)
	}
}

func TestCounterpartyFollowsItsIdentifierFingerprint(t *testing.T) {
	h := newLinkHarness(t)
	// Paid under the fingerprint key's version 1, then (the key rotated)
	// under version 2: the stored fingerprint follows the payments, so an
	// account fingerprinted under version 2 links it.
	h.pay(h.out, 0, "landlord", "v1-landlord-iban")
	h.pay(h.out, 1, "landlord", "v2-landlord-iban")
	h.register("a-landlord", "v2-landlord-iban")
	if got := h.linkedTo("landlord"); got != "a-landlord" {
		t.Errorf("linked to %q, want a-landlord (registered under the payment's newer fingerprint)", got)
	}
}

// TestAccountRegisteredWhileItsCounterpartyIsStoredLinks races an account's
// registration against the first payment to its number, in rounds: neither
// may miss the other (the advisory lock of migration 00010). Without the
// lock some rounds leave the counterparty unlinked.
func TestAccountRegisteredWhileItsCounterpartyIsStoredLinks(t *testing.T) {
	h := newLinkHarness(t)
	const rounds = 30
	for i := range rounds {
		dedupe, identity := fmt.Sprintf("race-%d", i), fmt.Sprintf("race-iban-%d", i)
		var wg sync.WaitGroup
		var regErr error
		wg.Go(func() { regErr = h.registerErr("a-"+dedupe, identity) })
		h.pay(h.out, i, dedupe, identity)
		wg.Wait()
		if regErr != nil {
			t.Fatal(regErr)
		}
	}
	if n := h.count(`SELECT count(*) FROM speculapro.counterparties WHERE account_id IS NULL`); n != 0 {
		t.Errorf("%d of %d counterparties unlinked after racing their account's registration", n, rounds)
	}
}
