package features

import (
	"context"
	"reflect"
	"testing"
	"time"
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
