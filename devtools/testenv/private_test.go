package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPrivateKafka starts a broker, writes a record, stops it cleanly, starts
// it again on the same data, reads the record back, then pauses and resumes it.
func TestPrivateKafka(t *testing.T) {
	t.Parallel()
	k := PrivateKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t1", Value: []byte("v1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	k.Stop()
	k.Start()
	k.Pause()
	if err := k.ready(); err == nil {
		t.Fatal("a paused broker answered a metadata request")
	}
	k.Resume()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t1", Value: []byte("v3")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()), kgo.ConsumeTopics("t1"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []string
	for len(got) < 2 && ctx.Err() == nil {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if len(got) < 2 || got[0] != "v1" || got[len(got)-1] != "v3" {
		t.Fatalf("records after restart = %v, want v1 first and v3 last", got)
	}
}

func TestPrivateRedis(t *testing.T) {
	t.Parallel()
	r := PrivateRedis(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Pause()
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET on a paused Redis succeeded")
	}
	r.Resume()
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET after resume = %q, %v", v, err)
	}
	r.Stop()
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET on a stopped Redis succeeded")
	}
	r.Start()
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET after restart = %v, want empty (no persistence)", err)
	}
	r.Kill()
	r.Start()
}

// TestPrivateRedisClusterFailover starts three masters with a replica each,
// writes a key with WAIT for its replica, kills the key's master, and reads
// the key from the promoted replica; the killed node rejoins as a replica.
func TestPrivateRedisClusterFailover(t *testing.T) {
	t.Parallel()
	c := PrivateRedisClusterWithReplicas(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cl.Close()
	if err := cl.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var master int = -1
	if err := cl.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		if n.Exists(ctx, "k").Val() == 1 {
			if got := n.Do(ctx, "wait", 1, 2000).Val(); got != int64(1) {
				t.Errorf("WAIT answered %v", got)
			}
			master = c.Index(n.Options().Addr)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if master < 0 {
		t.Fatal("no master holds the key")
	}
	replica := c.ReplicaOf(master)
	c.Kill(master)
	t.Logf("replica promoted %s after the kill", c.WaitPromoted(replica, 30*time.Second).Round(time.Millisecond))
	// A client sends to the dead master until it reloads the slots (60 s by
	// default): reload after each failed attempt, bounded.
	var v string
	var err error
	for try := 0; try < 50; try++ {
		if v, err = cl.Get(ctx, "k").Result(); err == nil {
			break
		}
		cl.ReloadState(ctx)
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || v != "v" {
		t.Fatalf("after the failover: %q, %v", v, err)
	}
	c.Start(master)
	t.Logf("healthy again %s after the restart", c.WaitHealthy(60*time.Second).Round(time.Millisecond))
}
