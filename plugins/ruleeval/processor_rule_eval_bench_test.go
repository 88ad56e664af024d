package ruleeval

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// BenchmarkProcessBatch: one stream batch of 5,000 transactions of one
// workspace through rule_eval with the starter pack in force, as the stream
// runs it (feature_update's features on each, the engine's own metrics),
// without I/O. Reported per event.
func BenchmarkProcessBatch(b *testing.B) {
	r, ws, _ := starterPackEval(b)
	const n = 5000
	in, work, feats := quietBatch(b, ws, n)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		copy(work, in)
		for _, msg := range work {
			msg.MetaSetMut(metaFeatures, feats)
		}
		b.StartTimer()
		if _, err := r.ProcessBatch(ctx, work); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
}

// starterPackEval is rule_eval with the starter pack in force for one
// workspace, put in force by hand as a load would: no I/O.
func starterPackEval(tb testing.TB) (*ruleEval, event.UUID, *rules.Program) {
	tb.Helper()
	paths, err := filepath.Glob("../../config/rules/*.yaml")
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no starter pack files (%v)", err)
	}
	defs, err := rules.ParseFiles(paths...)
	if err != nil {
		tb.Fatal(err)
	}
	var pack []rules.Rule
	for _, d := range defs {
		pack = append(pack, d.Rule)
	}
	prog, err := rules.Compile(pack)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := newRuleEval("postgres://nobody:x@127.0.0.1:1/none?sslmode=disable", event.KindTransaction, time.Minute, false, service.MockResources())
	if err != nil {
		tb.Fatal(err)
	}
	ws := event.UUID{7}
	loader := rules.NewLoader(nil, rules.LoaderOptions{})
	loader.Publish(rules.NewSet(map[event.UUID]*rules.Program{ws: prog}))
	r.loader.Store(loader)
	return r, ws, prog
}

// quietBatch is n transactions of ws nothing in the starter pack fires on,
// a batch to copy them into for each round, and the features to set on
// them (feature_update's work).
func quietBatch(tb testing.TB, ws event.UUID, n int) (in, work service.MessageBatch, feats rules.Features) {
	in = make(service.MessageBatch, n)
	for i := range in {
		in[i] = message(tb, ws, i, "12.50", nil)
	}
	return in, make(service.MessageBatch, n), rules.MapFeatures(quietFeatures())
}
