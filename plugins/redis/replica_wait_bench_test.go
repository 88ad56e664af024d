package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/features"
	"github.com/speculapro/speculapro/internal/testenv"
)

// BenchmarkReplicaWait is what replicas_to_wait costs: batches of 1,000
// transactions applied to the running totals on a private Redis Cluster of
// three masters with a replica each, with no WAIT (off) and with WAIT for
// one replica per written node (wait1), in the same run. It reports
// batches/s and events/s; wait1's ratio to off is the cost.
//
//	go test -run '^$' -bench BenchmarkReplicaWait -benchtime 200x ./plugins/redis/
func BenchmarkReplicaWait(b *testing.B) {
	cluster := testenv.PrivateRedisClusterWithReplicas(b, 3)
	ws := event.UUID{0x01, 0x8f, 0x2c, 0x4a, 0x11, 0x22, 0x73, 0x44, 0x85, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcd}
	for _, replicas := range []int64{0, 1} {
		b.Run(fmt.Sprintf("wait%d", replicas), func(b *testing.B) {
			c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cluster.Addrs()})
			defer c.Close()
			if replicas > 0 {
				c.OnNewNode(func(n *goredis.Client) { n.AddHook(replicaWaitHook{replicas: replicas, timeout: 2 * time.Second}) })
			}
			s := features.New(c, features.Options{KeyPrefix: fmt.Sprintf("spbench:wait%d:", replicas)})
			r := rand.New(rand.NewPCG(1, uint64(replicas)))
			start := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
			const batch = 1000
			next := 0
			events := func() []*event.Envelope {
				out := make([]*event.Envelope, batch)
				for i := range out {
					a := r.IntN(10000)
					at := start.Add(time.Duration(next) * 40 * time.Microsecond).Truncate(time.Second)
					ext := fmt.Sprintf("w%d-%d", replicas, next)
					next++
					out[i] = &event.Envelope{V: 1, Kind: event.KindTransaction, ID: event.TransactionID(ws, ext, at),
						WorkspaceID: ws, ExternalID: ext, OccurredAt: at, AccountExternalID: fmt.Sprintf("acc-%d", a),
						CustomerExternalID: fmt.Sprintf("cust-%d", a/2), Amount: fmt.Sprintf("%d.%02d", r.IntN(2000), r.IntN(100)),
						Currency: "EUR", Direction: event.DirectionOut,
						Counterparty: &event.Counterparty{Fingerprint: fmt.Sprintf("fp-%d-%d", a, r.IntN(20))}}
				}
				return out
			}
			ctx := context.Background()
			if _, err := s.Apply(ctx, events()); err != nil {
				b.Fatal(err)
			}
			batches := make([][]*event.Envelope, b.N)
			for i := range batches {
				batches[i] = events()
			}
			b.ResetTimer()
			t0 := time.Now()
			for i := 0; i < b.N; i++ {
				if _, err := s.Apply(ctx, batches[i]); err != nil {
					b.Fatal(err)
				}
			}
			el := time.Since(t0)
			b.ReportMetric(float64(b.N)/el.Seconds(), "batches/s")
			b.ReportMetric(float64(b.N*batch)/el.Seconds(), "events/s")
		})
	}
}
