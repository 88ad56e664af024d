package ingestapi

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"golang.org/x/time/rate"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// msgConflict answers a resend whose content differs from the first.
const msgConflict = "this external_id was accepted with other content; the first is kept (send a new external_id for a new transaction)"

// contentHash is the hash a resend is compared by (see contentHash), of
// the envelope as it leaves for Kafka: its counterparty protected already.
func (a *ingestAPI) contentHash(_ event.UUID, it *apirequest.Item) [8]byte {
	return contentHash(&it.Envelope)
}

// decide answers the first copy of each external_id of a request:
//   - Redis first (a claim per external_id, SET NX): an entry another
//     request wrote answers the resend with the first ID, duplicate or
//     conflict by content; a pending one (its request is sending it, or
//     died doing so) is sent again under the first ID and time, which the
//     persister stores once;
//   - a new claim is looked up in the database by (workspace_id,
//     external_id): stored already (its Redis entry expired or was lost)
//     answers with the stored ID, duplicate or conflict by the content
//     hash stored with the row (duplicate for a row stored before rows
//     kept one: its content is unknown). The lookup runs beside the
//     claim, for every candidate, rather than after it for the new claims
//     alone: at 16 × 500-item requests the two round trips one after the
//     other would be two waits in line (Redis's, PostgreSQL's) on a busy
//     machine. Only the new claims read its answer, and it says the same:
//     the row of an external_id whose Redis entry is gone was stored long
//     before this request (or, when Redis lost the entry, is covered no
//     better by a lookup a millisecond later);
//   - the rest go to the pipeline; what Kafka took is marked accepted, what
//     it did not is released.
//
// Redis unreachable: every item is answered retry. Sending without the
// check could store a resend whose occurred_at differs as a second row,
// and the client can always send again; a bad item is still answered
// rejected on its own. It returns deliver's settled (true when nothing was
// delivered).
func (a *ingestAPI) decide(ctx context.Context, ws event.UUID, kind event.Kind, topic string, candidates []*apirequest.Item, hashes [][8]byte, results []itemResult) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apirequest.ProbeTimeout)
	defer cancel()
	retryAll := func(msg string) {
		for _, it := range candidates {
			results[it.Index].Status, results[it.Index].Message = statusRetry, msg
		}
	}
	req, err := newRequestToken()
	if err != nil {
		a.Log.Errorf("ingest_api: reading a random request token: %v", err)
		retryAll("cannot check for an earlier copy now; send it again")
		return true
	}
	mine := make([]idemEntry, len(candidates))
	exts := make([]string, len(candidates))
	for i, it := range candidates {
		mine[i] = idemEntry{state: idemPending, id: it.ID, hash: hashes[it.Index], req: req}
		exts[i] = it.ExternalID
	}
	keys := a.idem.keys(kind, ws, exts)
	// Buffered, so the lookup's goroutine ends on its own (within its
	// timeout) when the claim fails and nobody reads it.
	lookup := make(chan storedLookup, 1)
	go func() {
		stored, err := a.storedIDs(ctx, ws, kind, exts)
		lookup <- storedLookup{stored, err}
	}()
	prev, err := a.idem.claim(rctx, keys, mine)
	if err != nil {
		a.logRedis(err)
		retryAll("cannot check for an earlier copy now; send it again")
		return true
	}
	a.resolvePending(rctx, prev)
	var fresh, send []int // indexes into candidates
	for i, it := range candidates {
		res := &results[it.Index]
		p := prev[i]
		switch {
		case p == nil:
			fresh = append(fresh, i)
		case p.state == idemStored:
			res.Status, res.ID = statusDuplicate, p.id.String()
		case p.hash != hashes[it.Index]:
			res.Status, res.ID, res.Message = statusConflict, p.id.String(), msgConflict
		case p.state == idemAccepted:
			res.Status, res.ID = statusDuplicate, p.id.String()
		default: // pending: maybe in Kafka, maybe not; the same record again is safe
			if err := it.WithID(p.id); err != nil {
				res.Status, res.Message = statusRetry, "cannot resend under the first ID; send it again"
				continue
			}
			mine[i] = idemEntry{state: idemPending, id: p.id, hash: p.hash}
			res.ID = p.id.String()
			send = append(send, i)
		}
	}

	if len(fresh) > 0 {
		send = a.answerStored(rctx, lookup, candidates, fresh, keys, hashes, results, send)
	}
	if len(send) == 0 {
		return true
	}
	items := make([]*apirequest.Item, len(send))
	for j, i := range send {
		items[j] = candidates[i]
	}
	settled := a.deliver(kind, topic, items, results)

	a.recordSent(ctx, req, candidates, send, prev, mine, keys, results)
	return settled
}

// answerStored answers the fresh candidates (claimed by nobody before)
// that the database already holds, from lookup, and writes their entries
// back to Redis; it returns send with the others, which go to Kafka.
func (a *ingestAPI) answerStored(rctx context.Context, lookup <-chan storedLookup, candidates []*apirequest.Item, fresh []int, keys []string, hashes [][8]byte, results []itemResult, send []int) []int {
	l := <-lookup
	stored, err := l.stored, l.err
	if err != nil {
		// The claim was new, so within the TTL nobody accepted this
		// external_id: the lookup only covers entries Redis lost or
		// expired, and Kafka, not PostgreSQL, is where an item must be
		// safe. Sending keeps ingest up while PostgreSQL is down.
		if a.rateLimited(&a.dbLogged) {
			a.Log.Warnf("ingest_api: looking up %d external IDs in the database, sending them anyway: %v", len(fresh), err)
		}
	}
	var upKeys []string
	var upEntries []idemEntry
	for _, i := range fresh {
		it := candidates[i]
		row, ok := stored[it.ExternalID]
		if !ok {
			send = append(send, i)
			continue
		}
		res := &results[it.Index]
		res.Status, res.ID = statusDuplicate, row.id.String()
		// The entry written back answers the next resends as this one
		// was: by the stored hash when the row has one (the entry is
		// then an accepted one, its hash the first content's), else
		// duplicate whatever they carry (stored).
		entry := idemEntry{state: idemStored, id: row.id, hash: hashes[it.Index]}
		if row.hashed {
			entry.state, entry.hash = idemAccepted, row.hash
			if row.hash != hashes[it.Index] {
				res.Status, res.Message = statusConflict, msgConflict
			}
		}
		upKeys = append(upKeys, keys[i])
		upEntries = append(upEntries, entry)
	}
	if err := a.idem.update(rctx, upKeys, upEntries); err != nil {
		a.logRedis(err)
	}
	return send
}

// recordSent writes back to Redis what Kafka took of the items sent.
func (a *ingestAPI) recordSent(ctx context.Context, req requestToken, candidates []*apirequest.Item, send []int, prev []*idemEntry, mine []idemEntry, keys []string, results []itemResult) {
	// What Kafka took: this request's own claims by its one marker, another
	// request's pending entries it sent again one by one. What Kafka did
	// not take: this request's claims are released, first, so the marker
	// never covers them.
	var accKeys, relKeys []string
	var accEntries, relEntries []idemEntry
	mark := false
	for _, i := range send {
		it := candidates[i]
		switch {
		case results[it.Index].Status == statusAccepted && prev[i] == nil:
			mark = true
		case results[it.Index].Status == statusAccepted:
			e := mine[i]
			e.state = idemAccepted
			accKeys, accEntries = append(accKeys, keys[i]), append(accEntries, e)
		case prev[i] == nil: // only this request's own claims
			relKeys, relEntries = append(relKeys, keys[i]), append(relEntries, mine[i])
		}
	}
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), apirequest.ProbeTimeout)
	defer ucancel()
	if err := a.idem.update(uctx, accKeys, accEntries); err != nil {
		a.logRedis(err)
	}
	if err := a.idem.release(uctx, relKeys, relEntries); err != nil {
		// The claims stay pending, read as "maybe in Kafka": a resend is
		// sent again under the first ID, safe; accepted they must not read.
		a.logRedis(err)
		return
	}
	if mark {
		if err := a.idem.markAccepted(uctx, req); err != nil {
			a.logRedis(err)
		}
	}
}

// resolvePending turns the pending entries a claim found into accepted ones
// where their request's marker says Kafka took them. Best effort: a marker
// that cannot be read leaves them pending, which sends them again under
// their first ID, safe.
func (a *ingestAPI) resolvePending(ctx context.Context, prev []*idemEntry) {
	var tokens []requestToken
	seen := map[requestToken]bool{}
	for _, p := range prev {
		if p != nil && p.state == idemPending && p.req != (requestToken{}) && !seen[p.req] {
			seen[p.req] = true
			tokens = append(tokens, p.req)
		}
	}
	if len(tokens) == 0 {
		return
	}
	accepted, err := a.idem.acceptedRequests(ctx, tokens)
	if err != nil {
		a.logRedis(err)
		return
	}
	for _, p := range prev {
		if p != nil && p.state == idemPending && accepted[p.req] {
			p.state = idemAccepted
		}
	}
}

// logRedis logs a Redis failure at most once every 10 s.
func (a *ingestAPI) logRedis(err error) {
	if a.rateLimited(&a.redisLogged) {
		a.Log.Warnf("ingest_api: Redis (resend check): %v", err)
	}
}

// rateLimited reports whether a WARN of the kind warns limits may be logged
// now: at most one every apirequest.LogEvery, so an outage logs a line every 10 s, not
// one per request.
func (a *ingestAPI) rateLimited(warns *rate.Sometimes) bool {
	due := false
	warns.Do(func() { due = true })
	return due
}

// storedLookup is what storedIDs answered.
type storedLookup struct {
	stored map[string]storedRow
	err    error
}

// storedRow is a stored external_id: its ID and, when the row keeps one
// (hashed), the content hash it was stored with.
type storedRow struct {
	id     event.UUID
	hash   [event.ContentHashLen]byte
	hashed bool
}

// storedIDs returns the IDs the persister stored the external IDs under,
// with their content hashes, looked up by the (workspace_id, external_id)
// index of every partition.
func (a *ingestAPI) storedIDs(ctx context.Context, ws event.UUID, kind event.Kind, exts []string) (map[string]storedRow, error) {
	table := "speculapro.transactions"
	if kind == event.KindAccountEvent {
		table = "speculapro.account_events"
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apirequest.ProbeTimeout)
	defer cancel()
	stored := make(map[string]storedRow)
	// One round trip: a batch runs as one implicit transaction, so the
	// workspace binding (set_config local) holds for the query, and no
	// BEGIN and COMMIT of their own wait on the request.
	var b pgx.Batch
	b.Queue(`SELECT set_config('speculapro.workspace_id', $1, true)`, ws.String())
	b.Queue(`SELECT external_id, id, content_hash FROM `+table+` WHERE workspace_id = $1 AND external_id = ANY($2)`, ws, exts)
	err := func() error {
		br := a.Pool.SendBatch(ctx, &b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("binding the session to its workspace: %w", err)
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ext string
			var row storedRow
			var hash []byte
			if err := rows.Scan(&ext, &row.id, &hash); err != nil {
				return err
			}
			// Another length is no hash this version wrote: unknown, as NULL.
			row.hashed = len(hash) == event.ContentHashLen
			copy(row.hash[:], hash)
			stored[ext] = row
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		return br.Close()
	}()
	if err != nil {
		return nil, fmt.Errorf("querying %s for %d external IDs: %w", table, len(exts), err)
	}
	return stored, nil
}

// inWorkspace runs fn in one transaction bound to ws by row-level security.
func (a *ingestAPI) inWorkspace(ctx context.Context, ws event.UUID, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('speculapro.workspace_id', $1, true)`, ws.String()); err != nil {
			return fmt.Errorf("binding the session to its workspace: %w", err)
		}
		return fn(tx)
	})
}
