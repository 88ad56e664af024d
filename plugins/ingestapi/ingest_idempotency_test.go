package ingestapi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/apisample"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/redisconn"
)

// txnAt is transaction ext at occurred_at at, with amount.
func (f *apiFixture) txnAt(ext string, at time.Time, amount string) string {
	return fmt.Sprintf(`{"external_id":%q,"occurred_at":%q,"account_external_id":"acc-1","amount":%q,"currency":"EUR","direction":"in"}`,
		ext, at.Format(time.RFC3339Nano), amount)
}

// A resend answers duplicate with the FIRST ID whatever its occurred_at, a
// resend with other content answers conflict with the first ID, and neither
// reaches the pipeline.
func TestResendAnswersTheFirstID(t *testing.T) {
	f := newAPIFixture(t)
	at := f.txTime.Add(123456 * time.Nanosecond) // sub-millisecond digits
	_, out := f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txnAt("idem-1", at, "10.00"))))
	st, ids := results(t, out)
	if st[0] != statusAccepted {
		t.Fatalf("first send: %v", out)
	}
	first := ids[0]
	if got, ok := event.OccurredAtOfID(event.UUID(mustUUID(t, first))); !ok || !got.Equal(at.Truncate(time.Microsecond)) {
		t.Errorf("the ID's time is %v, want occurred_at to the microsecond %v", got, at.Truncate(time.Microsecond))
	}
	sent := f.pipe.count()
	for _, shift := range []time.Duration{0, time.Microsecond, 500 * time.Microsecond, time.Millisecond, time.Hour} {
		_, out := f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txnAt("idem-1", at.Add(shift), "10.00"))))
		if st, ids := results(t, out); st[0] != statusDuplicate || ids[0] != first {
			t.Errorf("resend with occurred_at %+v: %v %v, want duplicate %s", shift, st, ids, first)
		}
	}
	_, out = f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txnAt("idem-1", at, "99999.00"))))
	if st, ids := results(t, out); st[0] != statusConflict || ids[0] != first || out["conflict"] != float64(1) {
		t.Errorf("resend with another amount: %v", out)
	}
	// Two copies in one request: the second like the first, or conflict.
	_, out = f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(
		f.txnAt("idem-2", at, "5.00"), f.txnAt("idem-2", at.Add(time.Millisecond), "5.00"), f.txnAt("idem-2", at, "6.00"))))
	if st, ids := results(t, out); strings.Join(st, ",") != "accepted,duplicate,conflict" || ids[1] != ids[0] || ids[2] != ids[0] {
		t.Errorf("copies in one request: %v %v", st, ids)
	}
	if n := f.pipe.count() - sent; n != 1 {
		t.Errorf("%d messages reached the pipeline for the resends, want 1 (idem-2's first copy)", n)
	}
}

// An external_id whose claim is pending (the request that claimed it died
// before Kafka answered, or is still waiting) is sent again under the first
// ID and time, which the persister stores once; a Kafka refusal gives the
// claim back, so the next resend is sent.
func TestPendingClaimResendsUnderTheFirstID(t *testing.T) {
	f := newAPIFixture(t)
	at := f.txTime
	firstID := event.TransactionID(f.wsA, "pend-1", at.Add(-time.Minute))
	it := apirequest.Item{ExternalID: "pend-1", Envelope: event.Envelope{Kind: event.KindTransaction, ExternalID: "pend-1", AccountExternalID: "acc-1", Amount: "10.00", Currency: "EUR", Direction: "in"}}
	key := f.a.idem.key(event.KindTransaction, f.wsA, "pend-1")
	entry := idemEntry{state: idemPending, id: firstID, hash: f.a.contentHash(f.wsA, &it)}
	if err := f.a.idem.client.Set(context.Background(), key, entry.value(), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, out := f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txnAt("pend-1", at, "10.00"))))
	if st, ids := results(t, out); st[0] != statusAccepted || ids[0] != firstID.String() {
		t.Fatalf("resend of a pending item: %v %v, want accepted under %s", st, ids, firstID)
	}
	last := f.pipe.delivered[len(f.pipe.delivered)-1]
	if !strings.Contains(string(last), firstID.String()) || !strings.Contains(string(last), at.Add(-time.Minute).Format(time.RFC3339Nano)) {
		t.Errorf("sent %s, want the first ID and its occurred_at", last)
	}

	// Kafka refuses: answered retry and the claim is released, so a resend
	// is sent (not answered duplicate for something Kafka never took).
	_, out = f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txnAt("kafka-down", at, "10.00"))))
	if st, _ := results(t, out); st[0] != statusRetry {
		t.Fatalf("kafka-down: %v", out)
	}
	n, err := f.a.idem.client.Exists(context.Background(), f.a.idem.key(event.KindTransaction, f.wsA, "kafka-down")).Result()
	if err != nil || n != 0 {
		t.Errorf("the claim of an item Kafka refused is still there (%d, %v)", n, err)
	}
}

// With Redis unreachable every valid item is answered retry (never
// accepted unchecked, which could store a resend twice); a bad item is
// still answered rejected.
func TestRedisDownAnswersRetry(t *testing.T) {
	f := newAPIFixtureWith(t, "redis://"+testenv.FreeAddr(t)+"/0")
	_, out := f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txn("r-1", ""), f.txn("r-2", `,"amount":"-1"`))))
	if st, _ := results(t, out); strings.Join(st, ",") != "retry,rejected" {
		t.Errorf("Redis down: %v", out)
	}
	if f.pipe.count() != 0 {
		t.Errorf("%d items reached the pipeline with Redis down", f.pipe.count())
	}
	if code, out := f.call(t, "GET", "/readyz", "", ""); code != 503 || out["redis"] != "unreachable" {
		t.Errorf("/readyz with Redis down: %d %v", code, out)
	}
}

// An entry's Redis memory, as the idempotency_ttl documentation states.
func TestIdempotencyEntrySize(t *testing.T) {
	f := newAPIFixture(t)
	ctx := context.Background()
	key := f.a.idem.key(event.KindTransaction, f.wsA, strings.Repeat("x", 36))
	// Most entries stay pending under their request (its marker accepts them).
	if err := f.a.idem.client.Set(ctx, key, idemEntry{state: idemPending, req: requestToken{1}}.value(), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := f.a.idem.client.MemoryUsage(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one idempotency entry: %d bytes of Redis memory (key %d bytes)", n, len(key))
	// The test's prefix is 21 bytes longer than the default "sp:".
	if n-int64(len(key)-len("sp:idem:{}")-22) > 140 {
		t.Errorf("an entry takes %d bytes, more than the 120 or so documented", n)
	}
}

func mustUUID(t *testing.T, s string) event.UUID {
	t.Helper()
	u, err := event.ParseUUID(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The resend check on a Redis Cluster: one pipeline's claims, updates and
// releases spread over the slots (each key is its own hash tag).
func TestIdempotencyOnRedisCluster(t *testing.T) {
	client, err := redisconn.Open(testenv.RedisClusterURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s := &idemStore{client: client, prefix: testRedisPrefix(t), ttl: time.Minute}
	ctx := context.Background()
	ws := event.UUID{9}
	var keys []string
	var entries []idemEntry
	for i := range 50 {
		keys = append(keys, s.key(event.KindTransaction, ws, fmt.Sprint("c-", i)))
		entries = append(entries, idemEntry{state: idemPending, id: event.UUID{byte(i), 1}})
	}
	prev, err := s.claim(ctx, keys, entries)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prev {
		if p != nil {
			t.Fatalf("key %d claimed before", i)
		}
	}
	acc := make([]idemEntry, len(entries))
	for i, e := range entries {
		e.state = idemAccepted
		acc[i] = e
	}
	if err := s.update(ctx, keys[:25], acc[:25]); err != nil {
		t.Fatal(err)
	}
	if err := s.release(ctx, keys[25:], entries[25:]); err != nil {
		t.Fatal(err)
	}
	// The claim set the TTL and the accepted mark kept it.
	for _, k := range []string{keys[0], keys[24]} {
		if ttl, err := client.TTL(ctx, k).Result(); err != nil || ttl <= 50*time.Second || ttl > time.Minute {
			t.Errorf("TTL of an accepted entry %v, %v; want about the minute it was claimed with", ttl, err)
		}
	}
	prev, err = s.claim(ctx, keys, entries)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prev {
		switch {
		case i < 25 && (p == nil || p.state != idemAccepted || p.id != entries[i].id):
			t.Errorf("key %d: %+v, want accepted with its first ID", i, p)
		case i >= 25 && p != nil:
			t.Errorf("key %d released but found %+v", i, p)
		}
	}
	for _, k := range keys {
		client.Del(ctx, k)
	}
}

// Keys and content hashes outlive a process (a resend may reach the next
// version within the TTL), so they never change: these are what the first
// implementation gave.
func TestIdempotencyKnownAnswers(t *testing.T) {
	s := &idemStore{prefix: "sp:"}
	if got := s.key(event.KindTransaction, apisample.Workspace, "ext-é-1"); got != "sp:idem:{zTC_AA1rMTn-iRdyU4uU2Q}" {
		t.Errorf("key %s", got)
	}
	got, err := apirequest.DecodeBatch(apisample.Batch(apisample.Transaction), event.KindTransaction, apisample.Workspace, apisample.Now, 10, apisample.Protector)
	if err != nil {
		t.Fatal(err)
	}
	it := got[0].Item
	it.Envelope.Counterparty.IdentifierFP = "fp-x" // the fingerprint the answer was taken with
	if h := contentHash(&it.Envelope); fmt.Sprintf("%x", h) != "294ae6198e80a04b" {
		t.Errorf("transaction content hash %x", h)
	}
	e := event.Envelope{Kind: event.KindAccountEvent, ExternalID: "ev", CustomerExternalID: "c", Type: "sim_swap", Attributes: []byte(`{"a":1}`)}
	if h := contentHash(&e); fmt.Sprintf("%x", h) != "4f5c7f7e243c7922" {
		t.Errorf("account event content hash %x", h)
	}
}

// The persister stores the content hash of the record it decodes, and the
// ingest API compares a resend with it once the Redis entry expired: the
// record must hash as the item it was built from did, whatever the client's
// spacing, escapes and counterparty, or an unchanged resend would be
// answered conflict.
func TestContentHashSurvivesTheRecord(t *testing.T) {
	for name, tc := range map[string]struct {
		kind event.Kind
		item string
	}{
		"transaction": {event.KindTransaction, apisample.Transaction},
		"name only":   {event.KindTransaction, strings.Replace(apisample.Transaction, `,"identifier":"DE89 3704 0044 0532 0130 00","identifier_kind":"iban"`, "", 1)},
		"no counterparty": {event.KindTransaction, `{"external_id":"t-2","occurred_at":"2026-11-30T07:41:12Z","account_external_id":"acc-1",` +
			`"amount":"0.5","currency":"EUR","direction":"in","metadata":{"note":"caf\u00e9 \"<&>\"","n":[1, 2.50]}}`},
		"account event": {event.KindAccountEvent, `{"external_id":"ev-1","occurred_at":"2026-11-30T07:41:12Z","customer_external_id":"c-1",` +
			`"type":"sim_swap","attributes":{ "ip" : "203.0.113.7", "é": "\u2028" }}`},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := apirequest.DecodeBatch(apisample.Batch(tc.item), tc.kind, apisample.Workspace, apisample.Now, 10, apisample.Protector)
			if err != nil || len(got[0].Errors) > 0 {
				t.Fatalf("decoding the item: %v %v", err, got[0].Errors)
			}
			it := got[0].Item
			rec, err := event.DecodeAt(it.Value, apisample.Now)
			if err != nil {
				t.Fatalf("decoding the record: %v", err)
			}
			if a, b := contentHash(&it.Envelope), event.ContentHash(&rec); a != b {
				t.Errorf("the item hashes %x, its record %x", a, b)
			}
		})
	}
}

// A request's claims are pending entries naming the request, and one
// marker makes them accepted once Kafka took them: a resend is duplicate
// by the marker, an item Kafka refused is released before the marker is
// written (so the marker never covers it), and without the marker (the
// request died before writing it) a resend is sent again under the first
// ID, as for any pending entry.
func TestRequestMarkerAcceptsItsClaims(t *testing.T) {
	f := newAPIFixture(t)
	ctx := context.Background()
	body := string(apisample.Batch(f.txnAt("mark-1", f.txTime, "1.00"), f.txnAt("kafka-down", f.txTime, "1.00")))
	_, out := f.call(t, "POST", "/v1/transactions", f.keyA, body)
	st, ids := results(t, out)
	if strings.Join(st, ",") != "accepted,retry" {
		t.Fatalf("first send: %v", out)
	}
	key := f.a.idem.key(event.KindTransaction, f.wsA, "mark-1")
	v, err := f.a.idem.client.Get(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := parseIdemEntry(v)
	if !ok || e.state != idemPending || e.req == (requestToken{}) || e.id.String() != ids[0] {
		t.Fatalf("entry %+v (%v), want pending under its request with the first ID", e, ok)
	}
	marker := f.a.idem.requestKey(e.req)
	if ttl, err := f.a.idem.client.TTL(ctx, marker).Result(); err != nil || ttl <= 9*time.Minute || ttl > 10*time.Minute {
		t.Fatalf("marker TTL %v, %v; want the 10m idempotency TTL", ttl, err)
	}
	if n, _ := f.a.idem.client.Exists(ctx, f.a.idem.key(event.KindTransaction, f.wsA, "kafka-down")).Result(); n != 0 {
		t.Errorf("the claim of an item Kafka refused is still there")
	}

	sent := f.pipe.count()
	_, out = f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txnAt("mark-1", f.txTime.Add(time.Second), "1.00"))))
	if st, got := results(t, out); st[0] != statusDuplicate || got[0] != ids[0] {
		t.Errorf("resend: %v %v, want duplicate %s", st, got, ids[0])
	}
	if f.pipe.count() != sent {
		t.Errorf("a resend of an accepted item reached the pipeline")
	}

	// No marker: the entry is pending, sent again under the first ID.
	if err := f.a.idem.client.Del(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	_, out = f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txnAt("mark-1", f.txTime.Add(time.Second), "1.00"))))
	if st, got := results(t, out); st[0] != statusAccepted || got[0] != ids[0] {
		t.Errorf("resend without the marker: %v %v, want accepted under %s", st, got, ids[0])
	}
	if f.pipe.count() != sent+1 {
		t.Errorf("%d messages reached the pipeline for the resend without a marker, want 1", f.pipe.count()-sent)
	}
	// That resend marked the other request's entry accepted itself.
	if v, err := f.a.idem.client.Get(ctx, key).Result(); err != nil || v[0] != idemAccepted {
		t.Errorf("entry after the resend: %q %v, want accepted", v, err)
	}
}

// Entries written before claims named their request still read.
func TestIdempotencyEntryFormats(t *testing.T) {
	id := event.UUID{1, 2, 3}
	for _, e := range []idemEntry{
		{state: idemPending, id: id, hash: [8]byte{7}},
		{state: idemPending, id: id, hash: [8]byte{7}, req: requestToken{9, 9}},
		{state: idemAccepted, id: id, hash: [8]byte{7}},
		{state: idemStored, id: id},
	} {
		got, ok := parseIdemEntry(e.value())
		if !ok || got != e {
			t.Errorf("%+v read back as %+v (%v)", e, got, ok)
		}
	}
	if len(idemEntry{state: idemAccepted, req: requestToken{1}}.value()) != idemValueLen {
		t.Errorf("an accepted entry carries a request token")
	}
	if _, ok := parseIdemEntry(string(idemAccepted) + strings.Repeat("x", idemValueLen+idemTokenLen-1)); ok {
		t.Errorf("an accepted entry with a token read")
	}
}
