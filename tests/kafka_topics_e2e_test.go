package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/kafkatopics"
)

func TestTopicsCommandAgainstRealBroker(t *testing.T) {
	t.Parallel()
	k := newTestKafka(t)
	prefix := uniqueName(t, "topics") + "."
	names := kafkatopics.Names(prefix)
	k.own(names, nil)
	env := map[string]string{"SP_KAFKA_BROKERS": strings.Join(k.brokers, ","), "SP_KAFKA_TOPIC_PREFIX": prefix, "SP_KAFKA_PARTITIONS": "3"}

	stdout, stderr, code := runBin(t, env, "topics")
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

	// A broker answers CreateTopics once its controller has the topics, and
	// serves them in metadata a moment later: wait (bounded) for that.
	waitUntil(t, 30*time.Second, "the 16 topics listed with 3 partitions each", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		details, err := k.adm.ListTopics(ctx, names...)
		if err != nil {
			return err
		}
		for _, n := range names {
			if d, ok := details[n]; !ok || d.Err != nil || len(d.Partitions) != 3 {
				return fmt.Errorf("topic %s: listed %v, err %v, %d partitions; want it with 3 partitions", n, ok, d.Err, len(d.Partitions))
			}
		}
		return nil
	})

	stdout, stderr, code = runBin(t, env, "topics")
	if code != 0 || stdout != "" {
		t.Fatalf("second run exited %d and printed %q (stderr %q), want exit 0 and nothing", code, stdout, stderr)
	}
}
