// Package features keeps the stream's running totals in Redis and returns,
// per event, the features rules are written against (docs/running-totals.md).
// Go computes, Redis stores: each entity (account, customer,
// counterparty) is one Redis string holding its whole state in a compact
// binary encoding; Apply reads every entity a batch touches, applies the
// events in Go and writes the changed values back with a compare-and-set.
//
// # Windows
//
// Windows are bucket-aligned in UTC and relative to the entity's head (the
// latest occurred_at of any event counted for it): 1h is the head's minute
// bucket and the 59 before it, 24h the head's hour and the 23 before, 7d and
// 30d the head's UTC day and the 6 / 29 before. The state keeps minute, hour
// and day buckets (60, 24 and 30 of them at most) and a feature is the sum of
// the buckets inside its window, added up in Go when it is read (at most
// 60 + 24 + 30 buckets). An event older than a window's start counts in the
// longer windows that still cover it; a bucket older than its level's
// longest window is not kept (heads only move forward, so it could never be
// in a window again). Every write prunes, relative to the head, the buckets
// and the other sides outside the longest window and the replay memory
// that expired, so a value stays bounded.
//
// # Keys
//
// One key per entity: <prefix>{<e>:<uuid>}, <prefix> default "sp:", <e> the
// entity letter (a account, c customer, p counterparty) and <uuid> the
// entity's id (event.AccountID, CustomerID, CounterpartyID: never an external
// id). The braces are the Cluster hash tag. The value is a string; its TTL is
// 31 days (the longest window plus a day) from the wall clock, refreshed on
// every write (an append within the hour after this process last set it
// leaves it: keyTTLRefresh), so an entity silent for that long is
// forgotten as a whole.
// Next to it, <prefix>{<e>:<uuid>}:r:<slot> are its replay snapshot
// strings (doc "Replays"), same hash tag, one per slot of 5 minutes
// (snapSlot) of the expiry of the events they hold, slot = expiry (unix
// ms) / 300,000; each expires (PEXPIREAT, set by the write that creates
// it) a minute after its slot's end. A
// counterparty's events are the payments to it: a transaction in which it
// pays in only reads its features.
//
// # Value format (version 3)
//
//	[0:8]  generation of the write that wrote the value whole: big-endian
//	       uint64, a random one on every write (two writers of the same
//	       value never write the same)
//	[8]    format version: 3 (2 and 1 are read too, below)
//	then the base, the state as last written whole, as unsigned / zigzag
//	varints:
//	       head, latest transaction, latest sim_swap, latest profile_change
//	         (unix s + 1; 0 = none)
//	       string table: count, then length + bytes (currencies, event types)
//	       3 levels (minute, hour, day): bucket count, then per bucket, oldest
//	         first: head bucket − bucket number; a flags byte; the counts
//	         present (out, in, distinct out, distinct in: the other sides whose
//	         latest transaction that way is in the bucket); sums: count, then
//	         (string index << 1 | in) and the amount; event types: count,
//	         then string index and count
//	       2 directions (out, in): count, then per other side its 16-byte id
//	         and head − its latest occurred_at
//	       replay memory: count, the earliest expiry (unix ms), then per
//	         event an 8-byte hash of its id and its expiry − the earliest
//	the generation of [0:8] again
//	then zero or more delta records (delta.go), one per write since the
//	base, each followed by that write's generation (8 bytes): the events
//	that write counted (id hash, occurred_at, direction, currency, amount,
//	the other side's id; or type), which a reader applies to the base in
//	order, exactly as the writer did, pruning after each as the writer did
//	(the record carries the write's wall-clock time and replay TTL).
//
// The value's generation, the one the CAS compares (GETRANGE -8 -1), is
// its last 8 bytes: the base's copy, or the last record's. A write appends
// its record and generation (ONE APPEND, in the CAS script) while the
// records after the base stay at most half the base's size; otherwise it
// writes the whole value again, as a new base. The copy in [0:8] keeps
// byte 8 the format version in every format.
//
// Format 2 (the release before) had the generation in [0:8] only (an
// append also SETRANGEd it there) and records without one; format 1 no
// records. Both are read: the CAS then compares their first 8 bytes
// (GETRANGE 0 7), which any write of another writer changes, since a
// value in them is never appended to: its next write rewrites it whole,
// in format 3.
// So a busy entity, whose base grows with its distinct other sides and its
// replay memory, costs each batch about 40 bytes per event it counts, not
// its whole value, and a value is at most 1.5 times its state.
//
// Amounts are integers in units of 0.0001 (transactions.amount is
// numeric(20,4)): uvarint(zigzag(n) << 1) below 2^62 in magnitude, else
// uvarint(len << 2 | sign << 1 | 1) and the magnitude's bytes, so sums stay
// exact at any size (math/big beyond int64). A single amount beyond ±10^11 is
// counted but left out of the sums (the documented behaviour). Sums are
// returned as json.Number with exactly four decimals ("1234.5000").
//
// Sizes (BenchmarkMemoryPerAccount): a few hundred bytes for most entities; 30
// days of a busy account (8 transactions a day, ~50 counterparties) about
// 2.7 KB, plus about 10 bytes per event id remembered; its delta records add up
// to half of that, and Redis allocates an appended string about twice its
// length (docs/running-totals.md, "Memory": 29 KB per account in all). A value grows with the
// distinct other sides of its 30 days (17–21 bytes each) and the events of its
// last replay TTL: a counterparty paid by 100,000 accounts a month is a 2 MB
// state, read when the process does not hold it and written whole only when
// its delta records reach half its size; decoded, a state takes two to
// three times its encoded size (40-byte buckets, 24-byte sums and event
// counts, 24-byte other sides and 16-byte replay entries, a long table's
// index 8-16 bytes an entry; none of it holds a pointer the collector would
// follow), which is why the cache keeps a small entity's value rather
// than its state (cache.go). A decoded state's arrays are carved from one allocation (its
// arena, decodeBufs.build, sized after the delta records are applied, so
// that none of its arrays outgrows it while decoding) and its currency and type names are shared
// (unique.Make): the collector's marking costs by the object, and a
// state decoded array by array would be about 18 of them, most of the
// stream's live objects at 1M events. A state the cache evicts, drops or replaces
// hands its arena to the next decode of about its size (arena.go), as does
// a batch the state of every entity it keeps as a value once computed, so
// the states a batch decodes are not each a new allocation.
//
// # Apply
//
// A batch's events are grouped by entity in order. Round trip 1: one
// pipeline of GET for every entity touched that the Store does not hold in
// its cache (cache.go: the values this process last wrote, or for large
// entities their decoded states, kept between batches within
// Options.CacheBytes as estimated, least recently used out first and a
// batch's busiest entities kept longest, checked by the write's CAS; an
// entity only read is checked instead: GETRANGE of its generation, read
// whole when Redis' differs from the cache's, recheck), on a Cluster one
// pipeline per node, in
// parallel; ApplyValuesUnless adds a GET per event of a key of the
// caller's (the decision API's remembered answers) and applies only the
// events whose key holds nothing. Go decodes each value it read or took from the cache (a large
// entity's state from the cache is computed on in place, by the one batch
// that holds it),
// applies the entity's events in order and records
// each event's features right after it, as figures (Values: rule_eval
// builds only the features its rules name; Apply builds the maps), the
// entities of a batch on GOMAXPROCS goroutines.
// Round trip 2: one pipeline writing every changed entity with its events'
// snapshots: per entity, for a key that did not exist SET NX EX, else a
// CAS (GETRANGE -8 -1, of an older format's value 0 7, must equal the
// generation read, then SET EX, or APPEND of its delta record and new
// generation and EXPIRE), and only
// if that wrote, APPEND of its events' snapshots to the snapshot string of
// their expiry's slot (all events a batch counts share one expiry) and,
// when that APPEND created it, its PEXPIREAT, all in one script call. On a single Redis one call writes
// up to 100 entities (the call itself costs about as much as its
// commands); on a Cluster, whose scripts cannot span slots, one call per
// entity. Within one process, a batch holds the entities it writes while
// it computes them (another batch needing a large one waits; a small one
// it reads from Redis, and one of the two CAS fails), then publishes their
// new states to the cache, so the next batch computes on them while this
// one is written; the process's writes reach Redis one batch after the
// other, in that order. A write lost to another writer
// (another stream process, the ingest API's best-effort account events)
// changes nothing; those entities alone are read again, recomputed from the
// new value and their features replaced, up to 12 rounds (a short random
// pause between), after which Apply fails naming how many still conflict.
// Entities that only read (replays, a counterparty paying in) are not
// written. A node that lost the script (restart, SCRIPT FLUSH) answers
// NOSCRIPT and gets the body once (EVAL). Only when the batch holds replays
// that were first applied in an earlier batch, round trip 3: one pipeline
// of GET, one per replayed entity and snapshot string, of their snapshots.
//
// The files follow these steps: store.go runs the rounds (ApplyValues);
// batch.go groups the events by entity (prepare, a map made for the batch);
// redis_read.go is round trip 1; compute.go is the computation, Go on the
// states in memory with no Redis (decodeState, applyOps, and encodeWrite,
// which readies the value to write); redis_write.go is round trip 2, with
// its scripts; replay.go is round trip 3 and the snapshot strings' keys.
// memory.go (Memory) runs the same computation (prepare, applyOps) on
// states it keeps with its entities from batch to batch (prepare groups
// the events by them), with no Redis, so with no replay memory, delta
// record or snapshot to keep: a backtest replays stored history through it.
//
// # Counted once
//
// Each entity remembers the events it counted for SP_STREAM_REPLAY_TTL of
// wall-clock time, as an 8-byte hash of the event id. An event remembered
// changes nothing. Two different events of one entity collide with
// probability about n²/2^65 for n events remembered at once (n = 10^6, a
// very busy entity in 30 minutes: 3·10^-8); a collision makes the later
// event a replay (not counted, and given the other event's features).
//
// # Replays
//
// A replay must re-decide exactly what its first application decided (a
// stream killed after the totals were written but before the hits were
// stored; a write whose reply was lost, retried; a group reset), so it gets
// exactly the features its first application returned, per entity. Every
// event counted leaves its entity's section of its features (account,
// customer or counterparty; compact varints, snapshot.go: about 50, 60 and
// 13 bytes) in one of the entity's snapshot strings <key>:r:<slot>, as a
// record appended by the SAME script call as the state that remembers the
// event: the event id's 8-byte hash (little-endian), the section's length
// (uvarint) and the section. A state never remembers an event without its
// snapshot. A counterparty that pays in is only read, never written: its
// section rides in the account's snapshot. The state remembers each event
// until an expiry (its write's wall-clock time plus the replay TTL); the
// snapshot goes to the string of that expiry's slot (expiry / snapSlot,
// fixed, so processes with different replay TTLs agree on the key), which
// expires as a whole snapMargin after the slot's end, so after every
// event in it is forgotten: nothing is deleted field by field, and a write
// costs one APPEND, not an HSET per event, an HDEL per event forgotten and
// the hash's EXPIRE. A replay looks its event up by the expiry its state
// remembers; the last record of an id wins (an event counted again after
// its state was reset, or after its memory expired, has a newer one).
// Records of events the state no longer remembers (reset, or counted
// again) are never read and go with their string.
//
// A replay of an event first applied earlier in the same batch takes the
// batch's own snapshot; others are fetched in one more round trip (Apply
// above). A replayed section without a snapshot (counted by a version
// before snapshots, or by one that kept them in the <key>:r hashes, which
// this one neither reads nor writes and which expire by themselves, or
// evicted by Redis) falls back to the features as they are now, with
// new_counterparty false and seconds_since_previous -1; Store.Snapshots
// counts restored and missing sections.
//
// Memory (BenchmarkMemoryPerAccount, Redis 7.0 MEMORY USAGE):
// docs/running-totals.md, "Memory".

// # Unreadable values
//
// A value that does not decode (damaged, or another format version, e.g.
// written by a newer release) is treated as empty: the batch's events are
// counted on a fresh state that overwrites it (by CAS against what was read),
// the other entities are applied as usual, and Apply returns every event's
// features together with a *CorruptError naming the kinds and how many (never
// an id). Resetting loses that entity's history but keeps the stream moving;
// rolling back to an older release after a newer format was written resets
// the entities it wrote. ReadAccount and friends return the error.
//
// The TTL runs on the wall clock, the windows on occurred_at: they agree for
// a live stream; a backfill of old data after more than 31 silent days starts
// an entity from zero.
package features
