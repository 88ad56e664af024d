package features

import (
	"github.com/speculapro/speculapro/internal/event"
)

// Memory computes the running totals of events held in memory, with no
// Redis: the Store's computation (prepare groups a batch's events by
// entity, applyOps applies them to each entity's state and records every
// event's features), on states kept in a map instead of Redis values. A
// backtest replays stored history through it, so the features it sees are
// the ones the stream computed, from the same code.
//
// It has no replay memory: every event given is counted (the history a
// backtest reads holds each event once). It is not safe for concurrent
// use; one Apply computes a batch's entities on up to GOMAXPROCS
// goroutines, as the Store does.
type Memory struct {
	states map[entityID]*state
	// bytes estimates the states' memory (Bytes), sizes each entity's
	// part of it as last measured.
	bytes int64
	sizes map[entityID]int64
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{states: map[entityID]*state{}, sizes: map[entityID]int64{}}
}

// Entities is how many entities (accounts, customers, counterparties)
// Memory holds a state for.
func (m *Memory) Entities() int { return len(m.states) }

// Bytes estimates the memory Memory's states take (state.size, refreshed
// for every entity a batch changed).
func (m *Memory) Bytes() int64 { return m.bytes }

// Apply applies events in order and returns, per event, its features right
// after it, as the Store's ApplyValues returns them for events applied for
// the first time.
func (m *Memory) Apply(events []*event.Envelope) ([]*Values, error) {
	var ents []*entity
	defer func() { releaseEntities(ents) }()
	preps, out, reads, err := prepare(events, &ents)
	if err != nil {
		return nil, err
	}
	r := &run{events: events, preps: preps, out: out, replayed: make([]bool, len(events))}
	if reads {
		r.reads = make([][]byte, len(events))
	}
	for _, e := range ents {
		st := m.states[e.eid]
		if st == nil {
			st = newState()
			if !readOnly(e) {
				// An entity only read (a counterparty paying in) has
				// nothing counted: it reads as empty and is not kept.
				m.states[e.eid] = st
			}
		}
		e.st = st
	}
	computeEach(ents, func(e *entity) {
		// No replay memory: a remembered id expires at 0 (ttl 0), and
		// prune at 0 forgets it, so every event counts and nothing grows.
		e.applyOps(r, 0, 0)
		if e.changed {
			e.st.prune(0)
		}
	})
	for _, e := range ents {
		if e.changed {
			n := e.st.size()
			m.bytes += n - m.sizes[e.eid]
			m.sizes[e.eid] = n
		}
	}
	return out, nil
}
