package tests

import (
	"strings"
	"testing"

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

	waitServed(t, k.adm, 3, names...)

	stdout, stderr, code = runBin(t, env, "topics")
	if code != 0 || stdout != "" {
		t.Fatalf("second run exited %d and printed %q (stderr %q), want exit 0 and nothing", code, stdout, stderr)
	}
}
