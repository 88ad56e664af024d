package apirequest

import (
	"context"
	"fmt"
	"testing"

	"github.com/speculapro/speculapro/internal/event"
)

// BenchmarkKeyCacheHit is the ingest API's per-request key lookup when the
// key is cached: what every request pays before its body is read.
func BenchmarkKeyCacheHit(b *testing.B) {
	c := NewKeyCache()
	hashes := make([][]byte, 1000)
	ws := keyGrant{ws: event.UUID{1}}
	for i := range hashes {
		hashes[i] = fmt.Appendf(nil, "key-hash-%04d", i)
		if _, err := c.resolve(context.Background(), hashes[i], func(context.Context, []byte) (*keyGrant, error) { return &ws, nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.resolve(context.Background(), hashes[i%len(hashes)], nil); err != nil {
			b.Fatal(err)
		}
	}
}
