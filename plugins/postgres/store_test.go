package postgres

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"

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
