package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPrivateKafkaCluster starts three nodes, makes a topic with the
// cluster's default replication and min.insync.replicas, and writes with
// acks=all after its leader was killed: a leader moves once the controller
// fences the killed node (its heartbeats stop for broker.session.timeout.ms).
func TestPrivateKafkaCluster(t *testing.T) {
	t.Parallel()
	c := StartPrivateKafkaCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers()...), kgo.RecordDeliveryTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, "t1"); err != nil {
		t.Fatal(err)
	}
	// CreateTopic answers before every broker's metadata has the topic, so
	// a listing right after may not show its partition yet.
	var topics kadm.TopicDetails
	for served := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		topics, err = adm.ListTopics(ctx, "t1")
		if err == nil && topics["t1"].Err == nil && len(topics["t1"].Partitions) == 1 || time.Now().After(served) {
			break
		}
	}
	if err != nil || len(topics["t1"].Partitions) != 1 || len(topics["t1"].Partitions[0].Replicas) != 3 {
		t.Fatalf("t1 = %+v, %v; want one partition with 3 replicas", topics["t1"], err)
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := cfgs.On("t1", nil); err != nil || configValue(v.Configs, "min.insync.replicas") != "2" {
		t.Fatalf("t1 min.insync.replicas = %q, %v; want 2", configValue(v.Configs, "min.insync.replicas"), err)
	}
	leader := c.Node(topics["t1"].Partitions[0].Leader)
	leader.Kill()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t1", Value: []byte("v1")}).FirstErr(); err != nil {
		t.Fatalf("acks=all with one node down: %v", err)
	}
}

func configValue(cs []kadm.Config, key string) string {
	for _, c := range cs {
		if c.Key == key && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}
