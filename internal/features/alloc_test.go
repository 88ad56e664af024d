package features

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// allocated is the bytes the process allocated while fn ran runs times,
// per run.
func allocated(runs int, fn func()) float64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	for range runs {
		fn()
	}
	runtime.ReadMemStats(&m1)
	return float64(m1.TotalAlloc-m0.TotalAlloc) / float64(runs)
}

// TestWriteArgumentsAreReused guards write's allocations: its script
// arguments (keys, generations, values, snapshot records, a few hundred
// bytes an entity) are built in arrays kept from batch to batch, so a
// batch of writes allocates per script call (go-redis' command and reply),
// not per entity.
func TestWriteArgumentsAreReused(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix})
	ctx := context.Background()
	const n = 1000
	gen := make([]byte, 8)
	binary.BigEndian.PutUint64(gen, 42)
	ents := make([]*entity, n)
	for i := range ents {
		e := &entity{eid: entityID{kind: entityAccount}, key: fmt.Sprintf("%s{a:%d}", prefix, i), changed: true, refreshTTL: true}
		e.skey, e.skeyAt = s.snapKey(e.key, time.Now().Add(time.Hour).UnixMilli())
		// The value ends with its generation: each write passes the CAS of
		// the next (the same generation every time).
		e.val = append(append(make([]byte, 0, 208), make([]byte, 200)...), gen...)
		e.snaps = []snap{{idh: uint64(i), b: make([]byte, 60)}}
		ents[i] = e
	}
	if lost, err := s.write(ctx, ents); err != nil || len(lost) != 0 {
		t.Fatalf("creating %d keys: %d lost, %v", n, len(lost), err)
	}
	for _, e := range ents {
		e.exists, e.gen, e.goff, e.v3 = true, string(gen), -genLen, true
	}
	var failed error
	per := allocated(20, func() {
		lost, err := s.write(ctx, ents)
		if err == nil && len(lost) != 0 {
			err = fmt.Errorf("%d of %d writes lost", len(lost), n)
		}
		if err != nil && failed == nil {
			failed = err
		}
	}) / n
	if failed != nil {
		t.Fatal(failed)
	}
	// Built afresh every batch, the arguments would be about 400 B an
	// entity. Under the race detector sync.Pool drops a quarter of what is
	// put back on purpose, so the bound is looser there, still well under
	// that.
	bound := 128.0
	if raceEnabled {
		bound = 300
	}
	if per > bound {
		t.Errorf("write allocated %.0f B an entity, want at most %.0f (its arguments reused)", per, bound)
	}
	t.Logf("write: %.1f B allocated an entity", per)
}

// TestApplyAllocationsPerEvent guards what a batch allocates per event on
// a warm Store (its entities cached): the entities, with the values they
// write, their snapshots and their delta records, are kept from batch to
// batch, as are write's arguments.
func TestApplyAllocationsPerEvent(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix})
	ctx := context.Background()
	const batch = 1000
	evs := realistic(30*batch, 2000, time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC), 3)
	for off := 0; off < 10*batch; off += batch {
		if _, _, err := s.ApplyValues(ctx, evs[off:off+batch]); err != nil {
			t.Fatal(err)
		}
	}
	off := 10 * batch
	var failed error
	per := allocated(20, func() {
		if _, _, err := s.ApplyValues(ctx, evs[off:off+batch]); err != nil && failed == nil {
			failed = err
		}
		off += batch
	}) / batch
	if failed != nil {
		t.Fatal(failed)
	}
	bound := applyBytesPerEvent
	if raceEnabled {
		bound = applyBytesPerEventRace
	}
	if per > bound {
		t.Errorf("Apply allocated %.0f B an event, want at most %.0f", per, bound)
	}
	t.Logf("Apply: %.1f B allocated an event", per)
}

// applyBytesPerEvent bounds TestApplyAllocationsPerEvent: Apply allocates
// about 3,800 B an event, and about 6,200 under the race detector, whose
// sync.Pool drops a quarter of what is put back: every entity a batch
// touches is decoded into a pooled state and arena, and a quarter of those
// are new. Entities built afresh every batch would take some 6,500 B.
const (
	applyBytesPerEvent     = 5000.0
	applyBytesPerEventRace = 7000.0
)
