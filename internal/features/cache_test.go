package features

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// checkCache holds the cache's books: its bytes are the sum of its states'
// estimates, within the budget, and the LRU ring holds exactly its states.
func checkCache(t *testing.T, c *cache) {
	t.Helper()
	var sum int64
	n := 0
	for x := c.lru.next; x != &c.lru; x = x.next {
		if c.m[x.eid] != x {
			t.Fatalf("%s is in the ring but not the map", x.key)
		}
		if x.key == "" {
			t.Fatalf("a cached state of %c:%s without its key", x.eid.kind, x.eid.id)
		}
		sum += x.size
		n++
	}
	if n != len(c.m) || sum != c.bytes {
		t.Fatalf("ring %d states of %d bytes, map %d states, books %d bytes", n, sum, len(c.m), c.bytes)
	}
	if c.bytes > c.max {
		t.Fatalf("cache holds %d bytes, budget %d", c.bytes, c.max)
	}
	if c.held != 0 {
		t.Fatalf("%d entities still held after Apply", c.held)
	}
	for _, x := range c.m {
		if !x.inRing || x.holder != -1 || (x.st == nil) == (x.val == nil) {
			t.Fatalf("%s stays in the map after Apply without a state or a value in the ring (in ring %v, holder %d, state %v, value %v)",
				x.key, x.inRing, x.holder, x.st != nil, x.val != nil)
		}
		if x.st != nil && !decodedKept(x.vlen) || x.val != nil && (decodedKept(x.vlen) || len(x.val) > x.vlen) {
			t.Fatalf("%s: a value of %d bytes kept as state %v, value of %d bytes %v", x.key, x.vlen, x.st != nil, len(x.val), x.val != nil)
		}
	}
}

// applyLikeRef applies batch b with s and with ref, a Store without a
// cache, and holds their features equal.
func applyLikeRef(t *testing.T, s, ref *Store, batch []*event.Envelope, b int) {
	t.Helper()
	got, err := s.Apply(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Apply(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("batch %d: features differ from a Store without a cache", b)
	}
}

// A small budget: the cache stays within it batch after batch, evicting
// the states used least recently, so an entity every batch touches (a busy
// counterparty) stays while the accounts paying it once come and go; and
// what it computes equals a Store without a cache.
func TestCacheStaysWithinItsBudget(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix, CacheBytes: 256 << 10})
	ref := New(c, Options{KeyPrefix: prefix + "ref:", CacheBytes: -1})
	at := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	busy := entityID{entityCounterparty, event.CounterpartyID(testWorkspace, "busy")}
	for b := range 20 {
		var batch []*event.Envelope
		for i := range 50 {
			k := b*50 + i
			batch = append(batch, txn(fmt.Sprint("t", k), fmt.Sprint("acc-", k), fmt.Sprint("cust-", k), "busy", "10.00", "EUR", event.DirectionOut, at.Add(time.Duration(k)*time.Second)))
		}
		applyLikeRef(t, s, ref, batch, b)
		checkCache(t, s.cache)
		if _, ok := s.cache.m[busy]; !ok {
			t.Fatalf("batch %d: the counterparty every batch pays was evicted", b)
		}
		if b >= 10 && len(s.cache.m) >= 2*50*(b+1) {
			t.Fatalf("batch %d: %d states cached within 256 KiB: nothing evicted", b, len(s.cache.m))
		}
	}
	t.Logf("%d states cached (%d bytes) of %d entities", len(s.cache.m), s.cache.bytes, 2*50*20+1)
	if hits, _ := s.CacheStats(); hits < 19 {
		t.Errorf("%d cache hits, want the counterparty's at least", hits)
	}
}

// A large entity (a counterparty paid by thousands of accounts, its replay
// memory and other sides in the thousands) computed on in place by batch
// after batch from the cache is, after every batch, the state a fresh
// decode of its Redis value gives, and its features those of a Store that
// decodes it every time.
func TestLargeCachedEntityEqualsAFreshDecode(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c, prefix, _ := open(t, tg)
			s := New(c, Options{KeyPrefix: prefix})
			ref := New(c, Options{KeyPrefix: prefix + "ref:", CacheBytes: -1})
			clock := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
			s.now, ref.now = func() time.Time { return clock }, func() time.Time { return clock }
			ctx := context.Background()
			eid := entityID{entityCounterparty, event.CounterpartyID(testWorkspace, "mule")}
			key := s.key(eid.kind, eid.id)
			k := 0
			for b := range 30 {
				var batch []*event.Envelope
				for range 150 {
					k++
					// Out of order in occurred_at, over two days.
					at := clock.Add(-time.Duration((k*7919)%(48*3600)) * time.Second)
					batch = append(batch, txn(fmt.Sprint("m", k), fmt.Sprint("acc-", k%2000), "", "mule", fmt.Sprintf("%d.%02d", k%900, k%100), "EUR", event.DirectionOut, at))
				}
				if b > 0 {
					// Replays of the previous batch ride along.
					batch = append(batch, batch[:10]...)
				}
				applyLikeRef(t, s, ref, batch, b)
				x, ok := s.cache.m[eid]
				if !ok {
					t.Fatalf("batch %d: the counterparty is not cached", b)
				}
				if x.key != key {
					t.Fatalf("batch %d: the cache names the entity's key %q, want %q", b, x.key, key)
				}
				v, err := c.Get(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				st, base, err := decodeBase(v)
				if err != nil {
					t.Fatal(err)
				}
				if len(v) != x.vlen || base != x.blen || func() string { g, _ := genAt(v); return g }() != x.gen {
					t.Fatalf("batch %d: Redis holds %d bytes (base %d), the cache says %d (base %d)", b, len(v), base, x.vlen, x.blen)
				}
				if string(encode(nil, 1, st)) != string(encode(nil, 1, x.state(t))) {
					t.Fatalf("batch %d: the cached state is not what its value decodes to", b)
				}
				clock = clock.Add(3 * time.Minute) // the replay memory expires too
			}
			if n := s.cache.m[eid].state(t).seen.len(); n < 1000 {
				t.Errorf("replay memory of %d events: not a large entity", n)
			}
		})
	}
}

// state is what x holds decoded: its state, or its value (Redis' value, or
// the same state encoded whole at Redis' generation: the tests compare the
// states).
func (x *cached) state(t testing.TB) *state {
	t.Helper()
	if x.st != nil {
		return x.st
	}
	st, _, err := decodeBase(string(x.val))
	if err != nil {
		t.Fatalf("%s: the cached value does not decode: %v", x.key, err)
	}
	return st
}

// A cached value that does not decode (the cache holds what this process
// encoded, so only a bug would do this) is read from Redis again: the
// entity's totals go on from what Redis holds, not from empty, and its
// features equal a Store's without a cache.
func TestUndecodableCachedValueIsReadAgain(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix})
	ref := New(c, Options{KeyPrefix: prefix + "ref:", CacheBytes: -1})
	at := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	acct := entityID{entityAccount, event.AccountID(testWorkspace, "acc-1")}
	for b := range 3 {
		var batch []*event.Envelope
		for i := range 5 {
			k := b*5 + i
			batch = append(batch, txn(fmt.Sprint("t", k), "acc-1", "cust-1", fmt.Sprint("cp-", k), "10.00", "EUR", event.DirectionOut, at.Add(time.Duration(k)*time.Second)))
		}
		if b == 2 {
			x := s.cache.m[acct]
			if x == nil || x.val == nil {
				t.Fatal("the account is not cached as a value")
			}
			for i := range x.val {
				x.val[i] = 0xff
			}
		}
		applyLikeRef(t, s, ref, batch, b)
		checkCache(t, s.cache)
	}
	got, err := c.Get(context.Background(), s.key(acct.kind, acct.id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	want, err := c.Get(context.Background(), ref.key(acct.kind, acct.id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	gst, _, err := decodeBase(got)
	if err != nil {
		t.Fatal(err)
	}
	wst, _, err := decodeBase(want)
	if err != nil {
		t.Fatal(err)
	}
	if gst.windows("EUR") != wst.windows("EUR") {
		t.Fatalf("the account's totals in Redis are %v, want %v (counted from empty?)", gst.windows("EUR"), wst.windows("EUR"))
	}
	if n := s.Conflicts(); n != 0 {
		t.Errorf("%d conflicts counted for a re-read", n)
	}
}
