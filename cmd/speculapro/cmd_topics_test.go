package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestRunTopicsNamesRefusedTopicsAndCreatesTheRest(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: "cmd.rule.hit.dlq", Err: kerr.PolicyViolation, Count: -1})
	for _, k := range []string{"SP_KAFKA_TLS_ENABLED", "SP_KAFKA_TLS_CA_FILE", "SP_KAFKA_TLS_CERT_FILE", "SP_KAFKA_TLS_KEY_FILE",
		"SP_KAFKA_SASL_MECHANISM", "SP_KAFKA_USERNAME", "SP_KAFKA_PASSWORD", "SP_KAFKA_REPLICATION_FACTOR"} {
		t.Setenv(k, "")
	}
	t.Setenv("SP_KAFKA_BROKERS", c.ListenAddrs()[0])
	t.Setenv("SP_KAFKA_TOPIC_PREFIX", "cmd.")
	t.Setenv("SP_KAFKA_PARTITIONS", "2")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err = runTopics(ctx, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "refused 1 of 16") {
		t.Fatalf("runTopics: %v, want it to fail naming 1 of 16 refused", err)
	}
	if n := strings.Count(stdout.String(), "created cmd."); n != 15 {
		t.Fatalf("stdout has %d created lines, want 15:\n%s", n, stdout.String())
	}
	if got := stderr.String(); !strings.HasPrefix(got, "error: topic cmd.rule.hit.dlq: POLICY_VIOLATION") || strings.Count(got, "\n") != 1 {
		t.Fatalf("stderr %q, want one line naming cmd.rule.hit.dlq and the broker's reason", got)
	}

	stdout.Reset()
	stderr.Reset()
	if err := runTopics(ctx, &stdout, &stderr); err == nil {
		t.Fatal("second run succeeded although the broker still refuses cmd.rule.hit.dlq")
	}
	if stdout.Len() != 0 {
		t.Fatalf("second run created again:\n%s", stdout.String())
	}
}
