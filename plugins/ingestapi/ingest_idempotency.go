package ingestapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

// States of an idempotency entry.
const (
	// idemPending: a request claimed the external_id and is handing it to
	// Kafka; whether Kafka took it is unknown until the entry turns
	// accepted (or is deleted when Kafka refused it).
	idemPending byte = 'P'
	// idemAccepted: Kafka acknowledged the item under the entry's ID.
	idemAccepted byte = 'A'
	// idemStored: the database holds the external_id under the entry's ID
	// (found by a request whose claim was new, e.g. after the entry
	// expired) in a row stored without its content hash; its first content
	// is unknown, so no conflict is answered. A row with its hash is
	// written back as accepted, with that hash.
	idemStored byte = 'S'
)

// idemValueLen is the stored value: state, ID (16) and content hash (8);
// a pending entry written since claims name their request adds the
// request's token (idemTokenLen), 37 bytes in all: 16 bytes more of Redis
// memory an entry (its allocation's next size; any token over 3 bytes
// costs the same), as TestIdempotencyEntrySize measures.
const (
	idemValueLen = 1 + 16 + 8
	idemTokenLen = 12
)

// requestToken names one request's claims: its pending entries carry it,
// and one marker under it (idemStore.markAccepted) turns all of them
// accepted at once, instead of one SET per item. Random, 96 bits: two
// requests within the TTL sharing one is as unlikely as guessing it.
type requestToken [idemTokenLen]byte

func newRequestToken() (requestToken, error) {
	var t requestToken
	_, err := rand.Read(t[:])
	return t, err
}

// idemEntry is what a claim found: the first request's state, ID and
// content hash, and for a pending entry the request that claimed it (zero:
// written before claims named their request, or updated since).
type idemEntry struct {
	state byte
	id    event.UUID
	hash  [8]byte
	req   requestToken
}

func (e idemEntry) value() string {
	var b [idemValueLen + idemTokenLen]byte
	return string(e.appendValue(b[:0]))
}

// appendValue appends the stored value of e to b.
func (e idemEntry) appendValue(b []byte) []byte {
	b = append(append(append(b, e.state), e.id[:]...), e.hash[:]...)
	if e.state == idemPending && e.req != (requestToken{}) {
		b = append(b, e.req[:]...)
	}
	return b
}

func parseIdemEntry(s string) (idemEntry, bool) {
	switch {
	case len(s) == idemValueLen && (s[0] == idemPending || s[0] == idemAccepted || s[0] == idemStored):
	case len(s) == idemValueLen+idemTokenLen && s[0] == idemPending:
	default:
		return idemEntry{}, false
	}
	var e idemEntry
	e.state = s[0]
	copy(e.id[:], s[1:17])
	copy(e.hash[:], s[17:idemValueLen])
	copy(e.req[:], s[idemValueLen:])
	return e, true
}

// idemStore remembers, per workspace, kind and external_id, the ID the
// item was first accepted under, in Redis with a TTL, so a resend is
// answered with that ID by every ingest process, across restarts, whatever
// occurred_at it carries. Keys are <prefix>idem:{<hash>}: the hash (SHA-256
// of kind, workspace and external_id, 16 bytes, base64url) keeps the
// external_id out of Redis and bounds the key's size, and the braces make
// it the key's Redis Cluster hash tag, so keys spread over the slots and
// each command of a pipeline goes to one node.
//
// The TTL must outlive the persister's lag: within it the entry answers
// (the database's (workspace_id, external_id) index answers once the entry
// expired, and the item is stored by then, with the content hash a resend
// is compared by). An accepted item that is not
// stored within the topic's retention is lost anyway, so the TTL is set to
// that retention (idempotency_ttl, SP_INGEST_IDEMPOTENCY_TTL, default 24h,
// the local stack's retention; Kafka's default is 168h). Each entry costs
// about 136 bytes of Redis memory with the default prefix
// (TestIdempotencyEntrySize): 1,000 items/s for 24 h is 86 M entries,
// about 12 GB; size Redis for it, or shorten the TTL to the persister's
// worst lag.
//
// A request's claims are pending entries naming its token; once Kafka took
// its items, one marker <prefix>idem-req:{<token>} (same TTL, written after
// the claims, so it outlives them) makes them all accepted: a claim that
// finds a pending entry whose request's marker exists reads it as
// accepted. Items Kafka did not take are released (deleted) before the
// marker is written, and no marker is written if a release failed, so a
// marker never covers an item that is not in Kafka.
type idemStore struct {
	client redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// releaseScript deletes a pending entry only while it is still the one
// this request wrote: a request whose items Kafka refused gives the
// external_id back, never someone else's claim.
// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT.
const releaseScript = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

func (s *idemStore) key(kind event.Kind, ws event.UUID, externalID string) string {
	var out [128]byte
	return string(s.appendKey(out[:0], kind, ws, externalID))
}

// appendKey appends the key of an external_id to k.
func (s *idemStore) appendKey(k []byte, kind event.Kind, ws event.UUID, externalID string) []byte {
	// One buffer hashed at once (sha256.Sum256 allocates nothing): the
	// same hash as writing the parts one by one.
	var in [256]byte
	b := append(append(append(append(in[:0], kind...), 0), ws[:]...), externalID...)
	sum := sha256.Sum256(b)
	k = append(append(k, s.prefix...), "idem:{"...)
	k = base64.RawURLEncoding.AppendEncode(k, sum[:16])
	return append(k, '}')
}

// keys are the keys of a request's external IDs, cut from one string
// (one allocation a request, not one a key).
func (s *idemStore) keys(kind event.Kind, ws event.UUID, externalIDs []string) []string {
	per := len(s.prefix) + len("idem:{}") + base64.RawURLEncoding.EncodedLen(16)
	buf := make([]byte, 0, per*len(externalIDs))
	for _, ext := range externalIDs {
		buf = s.appendKey(buf, kind, ws, ext)
	}
	// buf is never written again: the keys read it in place.
	all := unsafe.String(unsafe.SliceData(buf), len(buf))
	keys := make([]string, len(externalIDs))
	for i := range keys {
		keys[i] = all[i*per : (i+1)*per]
	}
	return keys
}

// requestKey is the marker key of a request's claims.
func (s *idemStore) requestKey(t requestToken) string {
	var out [128]byte
	k := append(append(out[:0], s.prefix...), "idem-req:{"...)
	k = base64.RawURLEncoding.AppendEncode(k, t[:])
	return string(append(k, '}'))
}

// markAccepted writes the marker that turns the request's pending entries
// accepted (see idemStore).
func (s *idemStore) markAccepted(ctx context.Context, t requestToken) error {
	if err := s.client.Set(ctx, s.requestKey(t), string(idemAccepted), s.ttl).Err(); err != nil {
		return fmt.Errorf("marking a request's external IDs accepted in Redis: %w", err)
	}
	return nil
}

// acceptedRequests reports which of the requests (distinct tokens) have
// their marker: one pipeline of EXISTS (the markers are on any node of a
// Cluster).
func (s *idemStore) acceptedRequests(ctx context.Context, tokens []requestToken) (map[requestToken]bool, error) {
	cmds := make([]*redis.IntCmd, len(tokens))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range tokens {
			cmds[i] = p.Exists(ctx, s.requestKey(t))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %d requests' accepted markers in Redis: %w", len(tokens), err)
	}
	out := make(map[requestToken]bool, len(tokens))
	for i, c := range cmds {
		if c.Val() > 0 {
			out[tokens[i]] = true
		}
	}
	return out, nil
}

// claim writes each entry where none exists (SET NX GET, with the TTL) and
// returns, per key, the entry that was there (nil: this request claimed
// it). One pipeline; an error means nothing is known about any key.
func (s *idemStore) claim(ctx context.Context, keys []string, entries []idemEntry) ([]*idemEntry, error) {
	cmds := make([]*redis.Cmd, len(keys))
	// SET key value NX GET EX|PX ttl, as SetArgs writes it, with its
	// arguments in one slice of the right size and the TTL boxed once per
	// request (SetArgs grows its slice and boxes each time: 40 % of the
	// claim's CPU).
	// The TTL is written as text once, not formatted for every command.
	unit, ttl := any("ex"), any(strconv.FormatInt(int64(s.ttl/time.Second), 10))
	if s.ttl < time.Second || s.ttl%time.Second != 0 {
		unit, ttl = any("px"), any(strconv.FormatInt(int64(s.ttl/time.Millisecond), 10))
	}
	// The values are cut from one string, and every command's arguments
	// from one slice, the key and value as pointers (which go-redis writes
	// and hashes to a slot like the strings): per claim, a command and
	// nothing else is allocated, where a slice, a value and two boxed
	// strings were.
	buf := make([]byte, 0, len(entries)*(idemValueLen+idemTokenLen))
	ends := make([]int, len(entries))
	for i, e := range entries {
		buf = e.appendValue(buf)
		ends[i] = len(buf)
	}
	all := unsafe.String(unsafe.SliceData(buf), len(buf)) // never written again
	values := make([]string, len(entries))
	for i, end := range ends {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		values[i] = all[start:end]
	}
	const argc = 7
	args := make([]any, argc*len(keys))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range keys {
			a := args[i*argc : (i+1)*argc : (i+1)*argc]
			a[0], a[1], a[2], a[3], a[4], a[5], a[6] = "set", &keys[i], &values[i], unit, ttl, "nx", "get"
			cmds[i] = p.Do(ctx, a...)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("claiming %d external IDs in Redis: %w", len(keys), err)
	}
	out := make([]*idemEntry, len(keys))
	for i, c := range cmds {
		v, err := c.Text()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("claiming %d external IDs in Redis: %w", len(keys), err)
		default:
			e, ok := parseIdemEntry(v)
			if !ok {
				// Not ours to read: take it as claimed by nobody, and the
				// database lookup decides.
				continue
			}
			out[i] = &e
		}
	}
	return out, nil
}

// update overwrites existing entries (SET XX KEEPTTL): pending to stored,
// or another request's pending entry this one sent again to accepted. Best effort: a failure leaves them pending, which a resend
// treats as "maybe in Kafka" and sends again under the same ID.
func (s *idemStore) update(ctx context.Context, keys []string, entries []idemEntry) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			p.Do(ctx, "set", k, entries[i].value(), "keepttl", "xx")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("marking %d external IDs accepted in Redis: %w", len(keys), err)
	}
	return nil
}

// release deletes this request's pending entries of items Kafka did not
// take, so a resend is not mistaken for one that may be in Kafka.
func (s *idemStore) release(ctx context.Context, keys []string, entries []idemEntry) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			p.Eval(ctx, releaseScript, []string{k}, entries[i].value())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("releasing %d external IDs in Redis: %w", len(keys), err)
	}
	return nil
}

// contentHash is what decides a resend is the same item: event.ContentHash,
// which the persister stores with the row too, so a resend found only in
// the database (its entry expired) is compared by the same bytes.
func contentHash(e *event.Envelope) [8]byte {
	return event.ContentHash(e)
}
