package features

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// casLua (a Cluster: one entity per call, keys of different slots cannot
// share one; writeLua is slower there) writes a value only if the key still
// holds the generation it was read with (at ARGV[7]: its last 8 bytes, -8,
// or in a value of an older format its first, 0: genAt), and in the
// same call appends the entity's replay snapshots (doc.go "Replays") to
// KEYS[2], its snapshot string of the events' expiry slot (same hash tag).
// ARGV: generation, value, TTL (s), "a" to append (the value is then a
// delta record and the new generation: delta.go) or "0", the snapshot
// records ("" for none), the unix ms at which a new snapshot string
// expires, the generation's offset.
const casLua = `local o = tonumber(ARGV[7])
if redis.call('GETRANGE', KEYS[1], o, o + 7) ~= ARGV[1] then
  return 0
end
if ARGV[4] == 'a' then
  redis.call('APPEND', KEYS[1], ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
end
if #ARGV[5] > 0 and redis.call('APPEND', KEYS[2], ARGV[5]) == #ARGV[5] then
  redis.call('PEXPIREAT', KEYS[2], ARGV[6])
end
return 1`

// createLua is casLua for a key that did not exist: SET NX instead of the
// generation compare. ARGV: value, TTL (s), the snapshot records, the
// snapshot string's expiry (unix ms).
const createLua = `if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  return 0
end
if #ARGV[3] > 0 and redis.call('APPEND', KEYS[2], ARGV[3]) == #ARGV[3] then
  redis.call('PEXPIREAT', KEYS[2], ARGV[4])
end
return 1`

// cas is loaded once per Redis node and called with EVALSHA; a node that
// answers NOSCRIPT gets the body (EVAL).
var cas, create = redis.NewScript(casLua), redis.NewScript(createLua)

// writeLua writes entities, each only if its key still holds the
// generation it was read with (genAt) or, for a key that did
// not exist, only if it still does not (SET NX), and in the same call, for
// each entity written, appends its replay snapshots (doc.go "Replays") to
// its snapshot string of their expiry slot: KEYS are pairs of an entity's
// key and that string (same hash tag). ARGV: TTL (s), then per entity: mode
// ("n" new key, "c" compare, "a" compare and append: the value is then a
// delta record, delta.go, "A" the same without refreshing the key's TTL,
// which this process did within keyTTLRefresh), generation read ("" for
// "n"), the offset GETRANGE reads it at ("-8" or, a value of an older
// format, "0": genAt), value (for "a" and "A" a delta record and the new
// generation, ONE APPEND), the snapshot records ("" for none), and the
// unix ms at which the snapshot string expires, set when this APPEND
// created it (the string's slot is fixed, so is its end).
// It returns one 1 (written) or 0 (lost to another writer) per entity.
// A single Redis writes up to perCall entities per call (one script call
// costs about as much as the commands it runs).
const writeLua = `local ttl = ARGV[1]
local res = {}
local a = 2
for k = 1, #KEYS, 2 do
  local key, mode = KEYS[k], ARGV[a]
  local ok
  if mode == 'n' then
    ok = redis.call('SET', key, ARGV[a + 3], 'NX', 'EX', ttl)
  else
    local o = tonumber(ARGV[a + 2])
    if redis.call('GETRANGE', key, o, o + 7) == ARGV[a + 1] then
      if mode == 'a' or mode == 'A' then
        ok = redis.call('APPEND', key, ARGV[a + 3])
        if mode == 'a' then
          redis.call('EXPIRE', key, ttl)
        end
      else
        ok = redis.call('SET', key, ARGV[a + 3], 'EX', ttl)
      end
    end
  end
  if ok then
    local snaps = ARGV[a + 4]
    if #snaps > 0 and redis.call('APPEND', KEYS[k + 1], snaps) == #snaps then
      redis.call('PEXPIREAT', KEYS[k + 1], ARGV[a + 5])
    end
    res[#res + 1] = 1
  else
    res[#res + 1] = 0
  end
  a = a + 6
end
return res`

// writeScript is loaded once per Redis node and called with EVALSHA; a node
// that answers NOSCRIPT gets the body (EVAL).
var writeScript = redis.NewScript(writeLua)

// perCall is how many entities one writeLua call writes on a single Redis
// (a Cluster refuses keys of different slots in one call: casLua and
// createLua, one entity each, are faster there).
// It bounds how long one call holds Redis (about 7 µs an entity).
const perCall = 100

// scriptArg is a script argument go-redis sends as its bytes
// (encoding.BinaryMarshaler). Arguments go as pointers (*scriptArg,
// *string, *int64), which an interface holds without an allocation: boxing
// every field and snapshot would be a third of what write allocates.
type scriptArg []byte

func (a *scriptArg) MarshalBinary() ([]byte, error) { return *a, nil }

// writeCall is one writeLua call of write: its entities, its arguments
// (EVALSHA, its hash, the number of keys, keys, ARGV) and its command.
type writeCall struct {
	ents []*entity
	args []any
	cmd  *redis.Cmd
}

// writeBufs are write's arrays, kept from batch to batch (writePool): the
// arguments of every call point into them, and allocating them afresh each
// batch would be about 6 % of the bytes a batch allocates (406 B an entity
// written; BenchmarkApplyLoadgen 6,425 B an event against 6,030 with them
// kept).
type writeBufs struct {
	changed []*entity
	calls   []writeCall
	args    []any
	strs    []string
	ints    []int64
	raws    []scriptArg
	blob    []byte
}

var writePool = sync.Pool{New: func() any { return new(writeBufs) }}

// release clears what points into the batch (entities, values, keys: they
// must not stay alive in the pool) and returns w to writePool.
func (w *writeBufs) release() {
	clear(w.changed)
	clear(w.calls)
	clear(w.args)
	clear(w.strs)
	clear(w.raws)
	if cap(w.blob) > 1<<20 {
		w.blob = nil // one batch's many snapshots: not kept for every batch
	}
	w.changed, w.calls, w.args, w.strs, w.ints, w.raws, w.blob = w.changed[:0], w.calls[:0], w.args[:0], w.strs[:0], w.ints[:0], w.raws[:0], w.blob[:0]
	writePool.Put(w)
}

// reuse returns b emptied, with room for n (a new array when it has not).
func reuse[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, 0, n)
	}
	return b[:0]
}

// write stores every changed entity and its snapshots in one pipeline of
// script calls, each entity only if nobody wrote it since it was read, and
// returns those somebody did.
func (s *Store) write(ctx context.Context, ents []*entity) ([]*entity, error) {
	if _, ok := s.client.(*redis.Client); !ok {
		return s.writeEach(ctx, ents)
	}
	wb := writePool.Get().(*writeBufs)
	defer wb.release()
	changed := wb.changed[:0]
	nSnaps := 0
	for _, e := range ents {
		if e.changed {
			changed = append(changed, e)
			for _, sn := range e.snaps {
				nSnaps += 8 + binary.MaxVarintLen64 + len(sn.b)
			}
		}
	}
	wb.changed = changed
	if len(changed) == 0 {
		return nil, nil
	}
	ttlArg := int64(keyTTL / time.Second)
	sha := writeScript.Hash()
	nCalls := (len(changed) + perCall - 1) / perCall
	// Sized for the whole batch before the first argument points into
	// them: an array that grew would move under the arguments.
	nArgs := 4*nCalls + 8*len(changed)
	calls := reuse(wb.calls, nCalls)
	args := reuse(wb.args, nArgs)
	strs := reuse(wb.strs, len(changed))
	ints := reuse(wb.ints, 2*nCalls+len(changed))
	raws := reuse(wb.raws, 2*len(changed))
	blob := reuse(wb.blob, nSnaps)
	// Kept (and cleared) by release whatever happens below.
	wb.calls, wb.args, wb.strs, wb.ints, wb.raws, wb.blob = calls, args, strs, ints, raws, blob
	capStrs, capInts, capRaws, capBlob := cap(strs), cap(ints), cap(raws), cap(blob)
	str := func(v string) *string { strs = append(strs, v); return &strs[len(strs)-1] }
	num := func(v int64) *int64 { ints = append(ints, v); return &ints[len(ints)-1] }
	raw := func(v []byte) *scriptArg { raws = append(raws, v); return &raws[len(raws)-1] }
	for len(changed) > 0 {
		c := writeCall{ents: changed[:min(perCall, len(changed))]}
		changed = changed[len(c.ents):]
		start := len(args)
		args = append(args, "evalsha", sha, num(int64(2*len(c.ents))))
		for _, e := range c.ents {
			if len(e.snaps) == 0 {
				// Untouched, but a key of the entity's slot all the same.
				args = append(args, &e.key, &e.key)
			} else {
				args = append(args, &e.key, &e.skey)
			}
		}
		args = append(args, num(ttlArg))
		for _, e := range c.ents {
			mode, gen, off := "n", "", "0"
			if e.exists {
				mode, gen = "c", e.gen
				if e.goff != 0 {
					off = "-8"
				}
				if e.appended && e.corrupt == nil {
					mode = "a"
					if !e.refreshTTL {
						mode = "A"
					}
				}
			}
			start := len(blob)
			blob = appendSnaps(blob, e.snaps)
			args = append(args, mode, str(gen), off, raw(e.val), raw(blob[start:len(blob):len(blob)]), num(e.skeyAt))
		}
		c.args = args[start:len(args):len(args)]
		calls = append(calls, c)
	}
	wb.calls, wb.args, wb.strs, wb.ints, wb.raws, wb.blob = calls, args, strs, ints, raws, blob
	if len(args) > nArgs || len(strs) > capStrs || len(ints) > capInts || len(raws) > capRaws || len(blob) > capBlob {
		// An array outgrown moved: earlier arguments would point into the old one.
		return nil, fmt.Errorf("features: writing %d entities: script arguments miscounted", len(wb.changed))
	}
	return s.exec(ctx, calls)
}

// exec sends calls in one pipeline (again with the script's body to a node
// that lost it) and returns the entities whose CAS failed.
func (s *Store) exec(ctx context.Context, calls []writeCall) ([]*entity, error) {
	pipe := s.client.Pipeline()
	for i := range calls {
		calls[i].cmd = pipe.Do(ctx, calls[i].args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// A node that lost its scripts (restart, SCRIPT FLUSH, failover)
		// answers NOSCRIPT without running anything: send exactly those
		// again with the body.
		var again []int
		for i := range calls {
			cerr := calls[i].cmd.Err()
			if cerr == nil || errors.Is(cerr, redis.Nil) {
				continue
			}
			if !redis.HasErrorPrefix(cerr, "NOSCRIPT") {
				return nil, fmt.Errorf("features: redis: writing %d entities: %w", len(calls[i].ents), cerr)
			}
			again = append(again, i)
		}
		if len(again) > 0 {
			pipe = s.client.Pipeline()
			for _, i := range again {
				args := append([]any{"eval", writeLua}, calls[i].args[2:]...)
				calls[i].cmd = pipe.Do(ctx, args...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return nil, fmt.Errorf("features: redis (script reload): %w", err)
			}
		}
	}
	var lost []*entity
	for i := range calls {
		c := &calls[i]
		res, err := c.cmd.Int64Slice()
		if err == nil && len(res) != len(c.ents) {
			err = fmt.Errorf("%d results for %d entities", len(res), len(c.ents))
		}
		if err != nil {
			return nil, fmt.Errorf("features: redis: writing %d entities: %w", len(c.ents), err)
		}
		for j, n := range res {
			if n != 1 {
				lost = append(lost, c.ents[j])
			}
		}
	}
	return lost, nil
}

// writeEach (a Cluster) stores every changed entity and its snapshots in one pipeline of
// CAS script calls, each only if nobody wrote the entity since it was read,
// and returns those somebody did.
func (s *Store) writeEach(ctx context.Context, ents []*entity) ([]*entity, error) {
	type w struct {
		e    *entity
		sc   *redis.Script
		keys []string
		args []any
		cas  *redis.Cmd
	}
	ws := make([]w, 0, len(ents))
	ttlArg := int64(keyTTL / time.Second)
	pipe := s.client.Pipeline()
	for _, e := range ents {
		if !e.changed {
			continue
		}
		skey := e.skey
		if len(e.snaps) == 0 {
			skey = e.key // untouched, but a key of the entity's slot all the same
		}
		snaps := appendSnaps(nil, e.snaps)
		x := w{e: e, sc: cas, keys: []string{e.key, skey}}
		if e.exists {
			mode := "0"
			if e.appended && e.corrupt == nil {
				mode = "a"
			}
			x.args = []any{e.gen, e.val, ttlArg, mode, snaps, e.skeyAt, e.goff}
		} else {
			x.sc = create
			x.args = []any{e.val, ttlArg, snaps, e.skeyAt}
		}
		x.cas = x.sc.EvalSha(ctx, pipe, x.keys, x.args...)
		ws = append(ws, x)
	}
	if len(ws) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// A node that lost its scripts (restart, SCRIPT FLUSH, failover)
		// answers NOSCRIPT without running anything: send exactly those
		// again with the body.
		var again []int
		for i, x := range ws {
			cerr := x.cas.Err()
			if cerr == nil || errors.Is(cerr, redis.Nil) {
				continue
			}
			if !redis.HasErrorPrefix(cerr, "NOSCRIPT") {
				return nil, fmt.Errorf("features: redis: writing a %s: %w", kindName(x.e.eid.kind), cerr)
			}
			again = append(again, i)
		}
		if len(again) > 0 {
			pipe = s.client.Pipeline()
			for _, i := range again {
				ws[i].cas = ws[i].sc.Eval(ctx, pipe, ws[i].keys, ws[i].args...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return nil, fmt.Errorf("features: redis (script reload): %w", err)
			}
		}
	}
	var lost []*entity
	for _, x := range ws {
		n, err := x.cas.Int64()
		if err != nil {
			return nil, fmt.Errorf("features: redis: writing a %s: %w", kindName(x.e.eid.kind), err)
		}
		if n != 1 {
			lost = append(lost, x.e)
		}
	}
	return lost, nil
}
