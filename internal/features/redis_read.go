package features

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
)

// load reads the values of ents, and the keys unless, in one pipeline; it
// returns the values of those keys, nil when none holds one.
func (s *Store) load(ctx context.Context, ents []*entity, unless []string) ([][]byte, error) {
	cmds := make([]*redis.StringCmd, len(ents))
	reads := 0
	for _, e := range ents {
		if !e.hit {
			reads++
		}
	}
	s.hits.Add(int64(len(ents) - reads))
	s.reads.Add(int64(reads))
	checks := 0
	for _, e := range ents {
		if e.hit && e.check {
			checks++
		}
	}
	if reads == 0 && checks == 0 && len(unless) == 0 {
		return nil, nil
	}
	gets := make([]*redis.StringCmd, len(unless))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range unless {
			gets[i] = p.Get(ctx, k)
		}
		for i, e := range ents {
			switch {
			case !e.hit:
				cmds[i] = p.Get(ctx, e.key)
			case e.check:
				cmds[i] = p.GetRange(ctx, e.key, int64(e.goff), int64(e.goff)+genLen-1)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("features: redis: reading %d entities: %w", len(ents), err)
	}
	var held [][]byte
	for i, g := range gets {
		b, err := g.Bytes()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("features: redis: reading %d keys with the entities: %w", len(unless), err)
		default:
			if held == nil {
				held = make([][]byte, len(unless))
			}
			held[i] = b
		}
	}
	if err := s.recheck(ctx, ents, cmds); err != nil {
		return nil, err
	}
	for i, e := range ents {
		if e.hit {
			continue
		}
		v, err := cmds[i].Result()
		switch {
		case errors.Is(err, redis.Nil):
			e.base, e.exists, e.gen, e.goff, e.v3, e.vlen = "", false, "", 0, false, 0
		case err != nil:
			return nil, fmt.Errorf("features: redis: reading a %s: %w", kindName(e.eid.kind), err)
		default:
			e.base, e.exists, e.vlen = v, true, len(v)
			e.gen, e.goff = genAt(v)
			e.v3 = e.goff != 0
		}
	}
	return held, nil
}

// recheck keeps the cached state of each entity only read whose generation
// in Redis (cmds[i], GETRANGE) is the cache's, and reads the others whole
// in one more pipeline (another writer changed them), into cmds.
func (s *Store) recheck(ctx context.Context, ents []*entity, cmds []*redis.StringCmd) error {
	var stale []int
	for i, e := range ents {
		if !e.hit || !e.check {
			continue
		}
		g, err := cmds[i].Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("features: redis: checking a %s: %w", kindName(e.eid.kind), err)
		}
		if g != e.gen {
			e.hit, e.st, e.cval = false, nil, nil
			stale = append(stale, i)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	s.hits.Add(-int64(len(stale)))
	s.reads.Add(int64(len(stale)))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range stale {
			cmds[i] = p.Get(ctx, ents[i].key)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("features: redis: reading %d entities: %w", len(stale), err)
	}
	return nil
}

// read returns one entity's state (empty when it has no key).
func (s *Store) read(ctx context.Context, entity byte, id event.UUID) (*state, error) {
	v, err := s.client.Get(ctx, s.key(entity, id)).Result()
	if errors.Is(err, redis.Nil) {
		return newState(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("features: redis: reading a %s: %w", kindName(entity), err)
	}
	st, err := decode(v)
	if err != nil {
		return nil, fmt.Errorf("features: reading a %s: %w", kindName(entity), err)
	}
	return st, nil
}
