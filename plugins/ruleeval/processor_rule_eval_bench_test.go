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
	paths, err := filepath.Glob("../../config/rules/*.yaml")
	if err != nil || len(paths) == 0 {
		b.Fatalf("no starter pack files (%v)", err)
	}
	defs, err := rules.ParseFiles(paths...)
	if err != nil {
		b.Fatal(err)
	}
	var pack []rules.Rule
	for _, d := range defs {
		pack = append(pack, d.Rule)
	}
	prog, err := rules.Compile(pack)
	if err != nil {
		b.Fatal(err)
	}
	r, err := newRuleEval("postgres://nobody:x@127.0.0.1:1/none?sslmode=disable", event.KindTransaction, time.Minute, false, service.MockResources())
	if err != nil {
		b.Fatal(err)
	}
	ws := event.UUID{7}
	loader := rules.NewLoader(nil, rules.LoaderOptions{})
	loader.Publish(rules.NewSet(map[event.UUID]*rules.Program{ws: prog}))
	r.loader.Store(loader)

	const n = 5000
	in := make(service.MessageBatch, n)
	for i := range in {
		in[i] = message(b, ws, i, "12.50", nil)
	}
	feats := rules.MapFeatures(quietFeatures())
	work := make(service.MessageBatch, n)
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
