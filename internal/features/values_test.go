package features

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// Values give each feature, one by one, as the map Map builds holds it,
// and nothing else; replays (features restored from snapshots) included.
func TestValuesFeatureByFeature(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	s := New(c, Options{KeyPrefix: prefix})
	ctx := context.Background()
	evs := realistic(600, 30, time.Now().UTC().Add(-time.Hour), 5)
	vals, _, err := s.ApplyValues(ctx, evs[:400])
	if err != nil {
		t.Fatal(err)
	}
	// A replay of the first 200 (their snapshots), with new events.
	again, replayed, err := s.ApplyValues(ctx, evs[:600])
	if err != nil {
		t.Fatal(err)
	}
	if !replayed[0] {
		t.Fatal("the second application of an event is no replay")
	}
	checked := 0
	for _, v := range append(vals, again...) {
		m := v.Map()
		for sec, sv := range m {
			if got := v.Has(sec); got != (sv != nil) {
				t.Fatalf("Has(%s) = %v for %v", sec, got, sv)
			}
			sm, _ := sv.(map[string]any)
			for name, want := range sm {
				if got := v.Feature(sec, name); !reflect.DeepEqual(got, want) {
					t.Fatalf("Feature(%s, %s) = %#v, the map holds %#v", sec, name, got, want)
				}
				checked++
			}
			if v.Feature(sec, "no_such_feature") != nil {
				t.Fatalf("Feature(%s, no_such_feature) is not nil", sec)
			}
		}
		if v.Has("no_such_section") || v.Feature("no_such_section", "out_count_1h") != nil {
			t.Fatal("a section that does not exist has features")
		}
	}
	if checked < 10000 {
		t.Fatalf("only %d features checked", checked)
	}
}

// A batch of many entities, computed on several goroutines, gives every
// event the features one computing them one after the other gives.
func TestParallelComputeAsSerial(t *testing.T) {
	c, prefix, _ := open(t, targets[0])
	par := New(c, Options{KeyPrefix: prefix})
	ser := New(c, Options{KeyPrefix: prefix + "serial:"})
	ser.serial = true
	clock := time.Now().UTC()
	par.now, ser.now = func() time.Time { return clock }, func() time.Time { return clock }
	ctx := context.Background()
	evs := realistic(6000, 2500, clock.Add(-time.Hour), 9)
	for off := 0; off < len(evs); off += 2000 {
		batch := evs[off : off+2000]
		if off > 0 {
			batch = append(append([]*event.Envelope(nil), evs[off-100:off]...), batch...) // replays
		}
		got, gotReplayed, err := par.ApplyReplays(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		want, wantReplayed, err := ser.ApplyReplays(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotReplayed, wantReplayed) {
			t.Fatalf("batch at %d: computed in parallel, the features differ from the serial ones", off)
		}
	}
}
