// Package features keeps the stream's running totals in Redis and returns,
// per event, the features rules are written against (README "Running totals
// (features)"). Every event is applied by one Lua call per entity it names
// (account, customer, counterparty), loaded once per node and called with
// EVALSHA; all calls of a batch go in one pipeline, which is one round trip
// to a single Redis and one per node on a Cluster.
//
// # Windows
//
// Windows are bucket-aligned in UTC and relative to the entity's head (the
// latest occurred_at bucket seen for it, either kind of event): 1h is the
// head's minute bucket and the 59 before it, 24h the head's hour and the 23
// before, 7d and 30d the head's UTC day and the 6 / 29 before. Totals are
// kept incrementally: when the head advances, the buckets leaving a window
// are subtracted from that window's totals, and deleted once they leave the
// longest window of their hash; an advance beyond the longest window empties
// the hash. So at most that many buckets are read per advance, and a read is
// one HMGET of totals. An event older than a window's start counts in the
// longer windows that still cover it; one older than the longest window of a
// hash is not kept in that hash at all (it could never be in its window
// again: heads only move forward).
//
// # Keys
//
// Every key is <prefix>{<e>:<uuid>}:<what>, <prefix> default "sp:", <e> the
// entity letter (a account, c customer, p counterparty) and <uuid> the
// entity's id (event.AccountID, CustomerID, CounterpartyID: never an
// external id). The braces are the Cluster hash tag: one entity's keys share
// a slot, so its Lua call runs on one node.
//
//	…:r   ZSET   replay memory: member = event id (16 raw bytes), score = the
//	             wall-clock ms until which it is remembered (now +
//	             SP_STREAM_REPLAY_TTL). Pruned (ZREMRANGEBYSCORE ≤ now) and
//	             checked (ZADD NX) in the same call that counts the event.
//	             TTL: replay TTL + 1 min, refreshed on every new event.
//	…:m   HASH   minute buckets, window 1h. TTL 2 h, refreshed on write.
//	…:h   HASH   hour buckets, window 24h. TTL 48 h, refreshed on write.
//	…:d   HASH   day buckets, windows 7d and 30d. TTL 31 d, refreshed on write.
//	…:po  ZSET   counterparties paid (account, customer) or accounts paying
//	             (counterparty): member = the other side's id (16 raw bytes),
//	             score = its latest occurred_at (unix s). Members older than
//	             the 30d window are pruned on write. TTL 31 d.
//	…:pi  ZSET   the same for direction in (accounts and customers). TTL 31 d.
//
// A counterparty's events are the payments to it: a transaction in which it
// pays in only reads its features (the script's read-only mode).
//
// Fields of the bucket hashes (<b> a bucket number: unix time / 60, 3600 or
// 86400; <w> a window's totals: t = the hash's longest window, s = 7d in the
// day hash):
//
//	h                  the head (bucket number)
//	d                  the bucket fields besides oc ic dp ds that exist (sums
//	                   per currency, event types), \x01-separated
//	<b>:oc <w>:oc      transactions out (all currencies); ic: in
//	<b>:os:<CUR> …     sum out in currency CUR, integer units of 0.0001; is: in
//	<b>:dp <w>:dp      counterparties whose latest payment out is in the bucket
//	                   (summed over a window: distinct payees); ds: in (senders)
//	<b>:e:<type> …     account events of that type
//	lt  (day hash)     latest transaction occurred_at (unix s)
//	mx  (day hash)     latest occurred_at of any event (unix s)
//	ls:sim_swap, ls:profile_change (day hash)   latest such account event (unix s)
//
// Each call reads a hash with one HMGET, computes in Lua and writes back with
// one HSET (plus one HMGET per bucket leaving a window). Lua numbers are
// doubles, so a value is computed in Lua only when both operands are below
// 2^52 in magnitude (the result is then an exact integer); beyond that (a
// huge sum of money) the field changes by HINCRBY with the amount as an
// integer string and is read back as a string. One amount is at
// most ±10^11 in currency units (10^15 units); a larger one is counted but
// left out of the sums, so that no HINCRBY can overflow halfway through a
// call (Redis does not roll a script back); a sum that would pass int64
// (9 * 10^14 in currency units) stays where it is. Zero-valued bucket and total
// fields are deleted. Sums are returned as json.Number with exactly four decimals
// ("1234.5000").
//
// Replays: an event id remembered in the entity's replay ZSET changes
// nothing; its features are read as they are, with new_counterparty false
// and seconds_since_previous -1. The TTLs are wall-clock: an entity silent
// for longer than a hash's TTL starts that hash from zero, which matches the
// windows as long as occurred_at follows the wall clock (it does for a live
// stream; a backfill of old data across long pauses would start partly
// from zero).
package features
