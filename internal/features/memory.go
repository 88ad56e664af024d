package features

import (
	"github.com/speculapro/speculapro/internal/event"
)

// Memory computes the running totals of events held in memory, with no
// Redis: the Store's computation (prepare groups a batch's events by
// entity, applyOps applies them to each entity's state and records every
// event's features), on states it keeps instead of Redis values. A
// backtest replays stored history through it, so the features it sees are
// the ones the stream computed, from the same code.
//
// It keeps, from batch to batch, each entity it has met (its state, its
// size, and the entity a batch computes it as) and the batch's per-event
// arrays: a batch looks each entity up once per event in one map and
// allocates nothing per event that the next batch could reuse. With no
// Redis to write it keeps no replay memory, delta records or snapshots
// (every event given is counted: the history a backtest reads holds each
// event once). It is not safe for concurrent use; one Apply computes a
// batch's entities on up to GOMAXPROCS goroutines, as the Store does.
type Memory struct {
	known map[entityID]*known
	// batch numbers the Apply calls; list is this one's entities, in the
	// order of their first event, each a Memory's own (spare holds them
	// from batch to batch, with their arrays); kept[i] is what Memory
	// knows of list[i].
	batch uint64
	list  []*entity
	kept  []*known
	spare []*entity
	arrs  batchArrays
	// bytes estimates the states' memory (Bytes); entities is how many
	// hold a state.
	bytes    int64
	entities int
}

// known is an entity Memory has met: its state (nil while nothing was
// counted on it: a counterparty only read), the size last measured of it,
// and the batch that last grouped it, as which of that batch's entities.
type known struct {
	st    *state
	size  int64
	batch uint64
	at    int
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{known: map[entityID]*known{}}
}

// Entities is how many entities (accounts, customers, counterparties)
// Memory holds a state for.
func (m *Memory) Entities() int { return m.entities }

// Bytes estimates the memory Memory's states take (state.size, refreshed
// for every entity a batch changed).
func (m *Memory) Bytes() int64 { return m.bytes }

// entity is Memory's grouping (prepare): the batch's entity eid, with its
// state.
func (m *Memory) entity(eid entityID) *entity {
	k := m.known[eid]
	if k == nil {
		k = &known{}
		m.known[eid] = k
	}
	if k.batch == m.batch {
		return m.list[k.at]
	}
	k.batch, k.at = m.batch, len(m.list)
	var e *entity
	if n := len(m.list); n < len(m.spare) {
		e = m.spare[n]
		*e = entity{ops: e.ops[:0]}
	} else {
		e = new(entity)
		m.spare = append(m.spare, e)
	}
	e.eid = eid
	if e.st = k.st; e.st == nil {
		// Nothing counted yet: an empty state, kept once the batch
		// counts an event on it (an entity only read reads as empty).
		e.st = newState()
	}
	m.list, m.kept = append(m.list, e), append(m.kept, k)
	return e
}

// Apply applies events in order and returns, per event, its features right
// after it, as the Store's ApplyValues returns them for events applied for
// the first time. They are valid until the next Apply, which reuses them.
func (m *Memory) Apply(events []*event.Envelope) ([]*Values, error) {
	m.batch++
	m.list, m.kept = m.list[:0], m.kept[:0]
	out, _, err := prepare(events, m, &m.arrs)
	if err != nil {
		return nil, err
	}
	r := &run{events: events, preps: m.arrs.preps, out: out, replayed: m.arrs.replayed, memory: true}
	computeEach(m.list, func(e *entity) {
		e.applyOps(r, 0, 0)
		if e.changed {
			e.st.prune(0)
		}
	})
	for i, e := range m.list {
		k := m.kept[i]
		switch {
		case e.changed:
			if k.st == nil {
				k.st = e.st
				m.entities++
			}
			n := e.st.size()
			m.bytes += n - k.size
			k.size = n
		case k.st == nil:
			e.st.free()
		}
		e.st = nil
	}
	return out, nil
}
