package embedkafka

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// A restart of dev must not lose what the broker acknowledged: produce, stop,
// start again on the same folder, and read the records back.
func TestRestartKeepsAcknowledgedRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kafka")
	addr := testenv.FreeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	b, err := Start(addr, dir)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, "kept"); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := 0; i < n; i++ {
		r := &kgo.Record{Topic: "kept", Key: []byte{byte(i)}, Value: []byte("v")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	cl.Close()
	b.Close()

	b, err = Start(addr, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err = kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("kept"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records after restart: %v", got, n, ctx.Err())
		}
		got += fs.NumRecords()
	}
	if got != n {
		t.Fatalf("read %d records after restart, want %d", got, n)
	}
}
