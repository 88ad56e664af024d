package decisionapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/features"
)

// A decision's Redis work goes in batches with the other decisions arriving
// meanwhile, one loop each for its two steps:
//
//   - applyLoop: the remembered answers of the batch's external_ids (one
//     pipeline of GETs), then the others applied to the running totals (one
//     features.Store.Apply: one Redis pipeline, every entity read and
//     CAS-written once per batch);
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
	gets := make([]*goredis.StringCmd, len(batch))
	_, err := a.redis.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, r := range batch {
			gets[i] = p.Get(ctx, r.key)
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		fail(batch, fmt.Errorf("reading remembered decisions: %w", err))
		return
	}
	a.breaker.ok()
	var fresh []applyReq
	for i, r := range batch {
		if b, err := gets[i].Bytes(); err == nil {
			var prev decisionResponse
			if json.Unmarshal(b, &prev) == nil {
				r.done <- applyRes{prev: &prev}
				continue
			}
		}
		// Not remembered (or unreadable: decided again).
		fresh = append(fresh, r)
	}
	if len(fresh) == 0 {
		return
	}
	envs := make([]*event.Envelope, len(fresh))
	for i, r := range fresh {
		envs[i] = r.env
	}
	a.breaker.asking()
	// Values, not maps: the rules build only the features they name.
	feats, _, err := a.store.ApplyValues(ctx, envs)
	var corrupt *features.CorruptError
	if errors.As(err, &corrupt) {
		err = nil // counted from empty, as the stream does
	}
	if err != nil {
		fail(fresh, err)
		return
	}
	a.breaker.ok()
	for i, r := range fresh {
		r.done <- applyRes{features: feats[i]}
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
