package decisionapi

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/features"
)

// A decision's Redis work goes in batches with the other decisions arriving
// meanwhile, one loop each for its two steps:
//
//   - applyLoop: the batch applied to the running totals, but for the
//     external_ids answered before (features.Store.ApplyValuesUnless: the
//     remembered answers read in the same pipeline as the entities, then
//     one pipeline CAS-writing every entity once per batch);
//   - rememberLoop: the batch's answers remembered (one pipeline of SET NX,
//     and of GETs for the twins that lost).
//
// So Redis round trips, connections and CAS conflicts between concurrent
// payments of one account do not grow with the rate. With one GET and one
// SET NX per decision, at 2,000 decisions/s the go-redis pool is the
// bottleneck: 7 % of the process's CPU waits for a connection
// (pool.waitTurn) and the remembered GET alone takes 11 %.

// applyReq is one decision's transaction waiting for its batch.
type applyReq struct {
	env  *event.Envelope
	key  string // its remembered answer's key
	done chan applyRes
}

type applyRes struct {
	prev     *decisionResponse // remembered: a repeat, nothing applied
	features *features.Values
	err      error
}

// applyBatched looks env's external_id up and, when it was not decided
// before, applies env to the running totals, with the other decisions of
// its batch.
func (a *decisionAPI) applyBatched(ctx context.Context, env *event.Envelope, key string) (applyRes, error) {
	req := applyReq{env: env, key: key, done: make(chan applyRes, 1)}
	select {
	case a.applyCh <- req:
	case <-ctx.Done():
		return applyRes{}, ctx.Err()
	}
	select {
	case r := <-req.done:
		return r, r.err
	case <-ctx.Done():
		return applyRes{}, ctx.Err()
	}
}

// applyLoop handles the decisions queued for applyBatched in batches.
func (a *decisionAPI) applyLoop(ctx context.Context) {
	batchLoop(ctx, a.applyCh, a.timeout, a.applyBatch)
}

func (a *decisionAPI) applyBatch(ctx context.Context, batch []applyReq) {
	fail := func(reqs []applyReq, err error) {
		for _, r := range reqs {
			r.done <- applyRes{err: err}
		}
	}
	// The breaker hears Redis' answers here, where they arrive, so an
	// answer counts even when every decision of the batch has given up.
	a.breaker.asking()
	envs, keys := make([]*event.Envelope, len(batch)), make([]string, len(batch))
	for i, r := range batch {
		envs[i], keys[i] = r.env, r.key
	}
	// Values, not maps: the rules build only the features they name. The
	// remembered answers are read with the entities (one round trip); a
	// repeat is not applied.
	feats, held, err := a.store.ApplyValuesUnless(ctx, envs, keys)
	if err = applyErr(err); err != nil {
		fail(batch, err)
		return
	}
	a.breaker.ok()
	var again []applyReq
	for i, r := range batch {
		if held != nil && held[i] != nil {
			var prev decisionResponse
			if json.Unmarshal(held[i], &prev) == nil {
				r.done <- applyRes{prev: &prev}
			} else {
				again = append(again, r) // unreadable: decided again
			}
			continue
		}
		r.done <- applyRes{features: feats[i]}
	}
	if len(again) > 0 {
		a.applyAgain(ctx, again)
	}
}

// applyErr is the running totals' err as the decision sees it: none for
// an entity whose value did not decode (counted from empty, as the stream
// does).
func applyErr(err error) error {
	var corrupt *features.CorruptError
	if errors.As(err, &corrupt) {
		return nil
	}
	return err
}

// applyAgain applies the decisions whose remembered answer did not read
// back, as if none were remembered.
func (a *decisionAPI) applyAgain(ctx context.Context, reqs []applyReq) {
	envs := make([]*event.Envelope, len(reqs))
	for i, r := range reqs {
		envs[i] = r.env
	}
	a.breaker.asking()
	feats, _, err := a.store.ApplyValues(ctx, envs)
	if err = applyErr(err); err == nil {
		a.breaker.ok()
	}
	for i, r := range reqs {
		if err != nil {
			r.done <- applyRes{err: err}
		} else {
			r.done <- applyRes{features: feats[i]}
		}
	}
}

// rememberReq is one decision's answer to remember.
type rememberReq struct {
	key  string
	val  []byte
	done chan *decisionResponse // the winner's answer when a twin was first; nil otherwise
}

// rememberBatched remembers val under key unless a twin's answer is there
// already, and returns that answer then. When Redis fails the decision
// stands (and is delivered): it is not remembered, so a repeat is decided
// again.
func (a *decisionAPI) rememberBatched(ctx context.Context, key string, val []byte) *decisionResponse {
	req := rememberReq{key: key, val: val, done: make(chan *decisionResponse, 1)}
	select {
	case a.rememberCh <- req:
	case <-ctx.Done():
		return nil
	}
	select {
	case prev := <-req.done:
		return prev
	case <-ctx.Done():
		return nil
	}
}

// rememberLoop handles the answers queued for rememberBatched in batches.
func (a *decisionAPI) rememberLoop(ctx context.Context) {
	batchLoop(ctx, a.rememberCh, a.timeout, a.rememberBatch)
}

func (a *decisionAPI) rememberBatch(ctx context.Context, batch []rememberReq) {
	sets := make([]*goredis.BoolCmd, len(batch))
	// An error leaves every command failed: each decision then stands.
	_, _ = a.redis.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, r := range batch {
			sets[i] = p.SetNX(ctx, r.key, r.val, a.remember)
		}
		return nil
	})
	var lost []int
	for i := range batch {
		if set, err := sets[i].Result(); err == nil && !set {
			lost = append(lost, i)
		}
	}
	answered := make([]*decisionResponse, len(batch))
	if len(lost) > 0 {
		// The twins that lost answer the winner's decision.
		gets := make([]*goredis.StringCmd, len(lost))
		_, _ = a.redis.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for j, i := range lost {
				gets[j] = p.Get(ctx, batch[i].key)
			}
			return nil
		})
		for j, i := range lost {
			if b, err := gets[j].Bytes(); err == nil {
				var prev decisionResponse
				if json.Unmarshal(b, &prev) == nil {
					answered[i] = &prev
				}
			}
		}
	}
	for i, r := range batch {
		r.done <- answered[i]
	}
}

// batchLoop waits for one request, takes what else is queued (up to
// decisionBatchMax) and handles them as one batch within timeout; while a
// batch runs the next one gathers. It returns once ctx ends.
func batchLoop[T any](ctx context.Context, ch chan T, timeout time.Duration, handle func(context.Context, []T)) {
	for {
		var batch []T
		select {
		case r := <-ch:
			batch = append(batch, r)
		case <-ctx.Done():
			return
		}
	gather:
		for len(batch) < decisionBatchMax {
			select {
			case r := <-ch:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		bctx, cancel := context.WithTimeout(ctx, timeout)
		handle(bctx, batch)
		cancel()
	}
}

// decisionBatchMax bounds one batch of either loop.
const decisionBatchMax = 256
