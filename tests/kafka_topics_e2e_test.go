package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/kafkatopics"
	"github.com/speculapro/speculapro/internal/testenv"
)

// kafkaE2EEnv is the environment for the binary: ours without any SP_KAFKA_*
// setting of the machine, plus the given ones.
func kafkaE2EEnv(brokers []string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SP_KAFKA_") {
			env = append(env, kv)
		}
	}
	env = append(env, "SP_KAFKA_BROKERS="+strings.Join(brokers, ","))
	return append(env, extra...)
}

// kafkaE2EName is a name no other test or engineer uses.
func kafkaE2EName(t *testing.T, what string) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("e2e-%s-%s", what, hex.EncodeToString(b))
}

// kafkaE2EAdmin is an admin client of the real broker. kgo caches metadata
// briefly, so tests take a fresh one for each look.
func kafkaE2EAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// kafkaE2EDeleteTopics removes the topics a test created, and only those.
func kafkaE2EDeleteTopics(t *testing.T, brokers []string, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Errorf("cleaning up topics: %v", err)
		return
	}
	defer cl.Close()
	resps, err := kadm.NewClient(cl).DeleteTopics(ctx, topics...)
	if err != nil {
		t.Errorf("deleting topics %v: %v", topics, err)
		return
	}
	for _, r := range resps {
		if r.Err != nil && !strings.Contains(r.Err.Error(), "UNKNOWN_TOPIC") {
			t.Errorf("deleting topic %s: %v", r.Topic, r.Err)
		}
	}
}

func kafkaE2ERun(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Binary(t), args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("running speculapro %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

func TestTopicsCommandAgainstRealBroker(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	prefix := kafkaE2EName(t, "topics") + "."
	names := kafkatopics.Names(prefix)
	t.Cleanup(func() { kafkaE2EDeleteTopics(t, brokers, names...) })
	env := kafkaE2EEnv(brokers, "SP_KAFKA_TOPIC_PREFIX="+prefix, "SP_KAFKA_PARTITIONS=3")

	stdout, stderr, code := kafkaE2ERun(t, env, "topics")
	if code != 0 {
		t.Fatalf("first run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var want []string
	for _, n := range names {
		want = append(want, "created "+n)
	}
	if got := strings.Split(strings.TrimSpace(stdout), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("first run printed:\n%s\nwant the 16 lines:\n%s", stdout, strings.Join(want, "\n"))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	details, err := kafkaE2EAdmin(t, brokers).ListTopics(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		d, ok := details[n]
		if !ok || d.Err != nil || len(d.Partitions) != 3 {
			t.Errorf("topic %s: listed %v, err %v, %d partitions; want it with 3 partitions", n, ok, d.Err, len(d.Partitions))
		}
	}

	stdout, stderr, code = kafkaE2ERun(t, env, "topics")
	if code != 0 || stdout != "" {
		t.Fatalf("second run exited %d and printed %q (stderr %q), want exit 0 and nothing", code, stdout, stderr)
	}
}
