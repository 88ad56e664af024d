package featureupdate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/features"
)

// BenchmarkReplicaWait is what replicas_to_wait costs: batches of 1,000
// transactions applied to the running totals on a private Redis Cluster of
// three masters with a replica each, alternately without WAIT and with WAIT
// for one replica per written node (each on its own keys), so both see the
// same machine load. It reports each one's batches/s and the ratio of with
// to without.
//
//	go test -run '^$' -bench BenchmarkReplicaWait -benchtime 200x ./plugins/featureupdate/
func BenchmarkReplicaWait(b *testing.B) {
	cluster := testenv.PrivateRedisClusterWithReplicas(b, 3)
	ws := event.UUID{0x01, 0x8f, 0x2c, 0x4a, 0x11, 0x22, 0x73, 0x44, 0x85, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcd}
	const batch = 1000
	type side struct {
		store   *features.Store
		batches [][]*event.Envelope
		took    time.Duration
	}
	var sides [2]side
	ctx := context.Background()
	for replicas := range sides {
		c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cluster.Addrs()})
		b.Cleanup(func() { c.Close() })
		if replicas > 0 {
			c.OnNewNode(func(n *goredis.Client) {
				n.AddHook(replicaWaitHook{replicas: int64(replicas), timeout: 2 * time.Second})
			})
		}
		sd := &sides[replicas]
		sd.store = features.New(c, features.Options{KeyPrefix: fmt.Sprintf("spbench:wait%d:", replicas)})
		r := rand.New(rand.NewPCG(1, 1))
		start := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
		next := 0
		for range b.N + 1 {
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
			sd.batches = append(sd.batches, out)
		}
		if _, err := sd.store.Apply(ctx, sd.batches[0]); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		for j := range sides {
			t0 := time.Now()
			if _, err := sides[j].store.Apply(ctx, sides[j].batches[i]); err != nil {
				b.Fatal(err)
			}
			sides[j].took += time.Since(t0)
		}
	}
	off, on := float64(b.N)/sides[0].took.Seconds(), float64(b.N)/sides[1].took.Seconds()
	b.ReportMetric(off, "batches/s-off")
	b.ReportMetric(on, "batches/s-wait1")
	b.ReportMetric(on/off, "wait1/off")
}
