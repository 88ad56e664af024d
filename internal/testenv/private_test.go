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
