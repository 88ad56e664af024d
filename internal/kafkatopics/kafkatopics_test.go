package kafkatopics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestNames(t *testing.T) {
	got := Names("sp.")
	want := []string{
		"sp.txn.ingested", "sp.txn.ingested.dlq", "sp.account.events", "sp.account.events.dlq",
		"sp.txn.decided", "sp.txn.decided.dlq", "sp.entity.updated", "sp.entity.updated.dlq",
		"sp.rule.hit", "sp.rule.hit.dlq", "sp.alert.created", "sp.alert.created.dlq",
		"sp.case.events", "sp.case.events.dlq", "sp.notify.requests", "sp.notify.requests.dlq",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("Names(sp.) = %v, want %v", got, want)
	}
}

func TestSpecFromEnv(t *testing.T) {
	tests := []struct {
		prefix, parts, rf string
		want              Spec
		wantErr           string
	}{
		{want: Spec{"sp.", 64, -1}},
		{prefix: "dev.", parts: "3", rf: "3", want: Spec{"dev.", 3, 3}},
		{parts: "0", wantErr: "SP_KAFKA_PARTITIONS"},
		{parts: "many", wantErr: "SP_KAFKA_PARTITIONS"},
		{rf: "0", wantErr: "SP_KAFKA_REPLICATION_FACTOR"},
		{rf: "-2", wantErr: "SP_KAFKA_REPLICATION_FACTOR"},
	}
	for _, tt := range tests {
		t.Setenv("SP_KAFKA_TOPIC_PREFIX", tt.prefix)
		t.Setenv("SP_KAFKA_PARTITIONS", tt.parts)
		t.Setenv("SP_KAFKA_REPLICATION_FACTOR", tt.rf)
		got, err := SpecFromEnv()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("SpecFromEnv(%q,%q): err %v, want one naming %s", tt.parts, tt.rf, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("SpecFromEnv(%q,%q,%q) = %+v, %v; want %+v", tt.prefix, tt.parts, tt.rf, got, err, tt.want)
		}
	}
}

func newAdmin(t *testing.T, c *kfake.Cluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestEnsureCreatesOnceAndLeavesExistingAlone(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adm := newAdmin(t, c)
	spec := Spec{Prefix: "t1.", Partitions: 3, ReplicationFactor: -1}

	// One topic exists already with another partition count and a config
	// of its own; Ensure must not change either.
	pre := "t1.rule.hit"
	if _, err := adm.CreateTopic(ctx(t), 5, -1, map[string]*string{"retention.ms": kadm.StringPtr("1234")}, pre); err != nil {
		t.Fatal(err)
	}

	res, err := Ensure(ctx(t), adm, spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 15 || len(res.Existing) != 1 || res.Existing[0] != pre || len(res.Refused) != 0 {
		t.Fatalf("first run: %+v, want 15 created, %s existing", res, pre)
	}
	// A fresh client each time: kgo briefly caches metadata answers.
	details, err := newAdmin(t, c).ListTopics(ctx(t), Names(spec.Prefix)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range Names(spec.Prefix) {
		want := 3
		if n == pre {
			want = 5
		}
		if got := len(details[n].Partitions); got != want {
			t.Errorf("%s has %d partitions, want %d", n, got, want)
		}
	}

	res, err = Ensure(ctx(t), newAdmin(t, c), Spec{Prefix: "t1.", Partitions: 7, ReplicationFactor: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 0 || len(res.Existing) != 16 || len(res.Refused) != 0 {
		t.Fatalf("second run: %+v, want all 16 existing", res)
	}
	details, err = newAdmin(t, c).ListTopics(ctx(t), Names(spec.Prefix)...)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(details["t1.txn.ingested"].Partitions); got != 3 {
		t.Fatalf("second run with 7 partitions changed t1.txn.ingested to %d partitions", got)
	}
	rc, err := adm.DescribeTopicConfigs(ctx(t), pre)
	if err != nil {
		t.Fatal(err)
	}
	v, err := rc.On(pre, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cfg := range v.Configs {
		if cfg.Key == "retention.ms" && cfg.Value != nil && *cfg.Value == "1234" {
			found = true
		}
	}
	if !found {
		t.Fatalf("%s lost its retention.ms=1234", pre)
	}
}

func TestEnsureReportsRefusedTopicsAndCreatesTheRest(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	refusedTopics := []string{"t2.case.events", "t2.notify.requests.dlq"}
	for _, tp := range refusedTopics {
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: tp, Err: kerr.PolicyViolation, Count: -1})
	}
	adm := newAdmin(t, c)
	res, err := Ensure(ctx(t), adm, Spec{Prefix: "t2.", Partitions: 2, ReplicationFactor: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 14 || len(res.Refused) != 2 {
		t.Fatalf("got %+v, want 14 created and 2 refused", res)
	}
	for i, r := range res.Refused {
		if r.Topic != refusedTopics[i] || !strings.Contains(r.Reason, "POLICY_VIOLATION") {
			t.Errorf("refusal %d = %+v, want %s with the broker's POLICY_VIOLATION", i, r, refusedTopics[i])
		}
	}
	details, err := newAdmin(t, c).ListTopics(ctx(t), Names("t2.")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range res.Created {
		if d := details[n]; d.Err != nil || len(d.Partitions) != 2 {
			t.Errorf("created %s: err %v, %d partitions; want 2 partitions", n, d.Err, len(d.Partitions))
		}
	}
}

func TestEnsureFailsWhenTheBrokerIsUnreachable(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := Ensure(c, kadm.NewClient(cl), Spec{Prefix: "x.", Partitions: 1, ReplicationFactor: -1}); err == nil {
		t.Fatal("Ensure against no broker returned no error")
	}
}
