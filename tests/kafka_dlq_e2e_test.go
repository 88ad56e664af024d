package tests

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// TestDLQExamplePipeline runs config/examples/dlq.yaml against the real
// broker: flagged records land on the .dlq twin with their key, value and
// headers plus source-offset, and the others carry on.
func TestDLQExamplePipeline(t *testing.T) {
	t.Parallel()
	k := newTestKafka(t)
	brokers := k.brokers
	topic := uniqueName(t, "dlq")
	dlq := topic + ".dlq"
	k.create(t, 3, topic, dlq)
	k.own(nil, []string{topic})

	const total = 20
	var records []*kgo.Record
	for i := range total {
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "ws-1:acct-%d", i),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: fmt.Appendf(nil, "t-%d", i)}}}
		switch {
		case i == 0:
			r.Key, r.Value = nil, []byte("garbage without a key")
		case i%4 == 0:
			r.Value = fmt.Appendf(nil, "garbage-%d", i)
		case i%5 == 0:
			r.Value = fmt.Appendf(nil, `{"v":1,"id":"t-%d"}`, i) // no workspace_id
		default:
			r.Value = fmt.Appendf(nil, `{"v":1,"id":"t-%d","workspace_id":"w-1"}`, i)
		}
		records = append(records, r)
	}
	k.produce(t, records...)
	wantDead := map[string]*kgo.Record{} // by value
	for _, r := range records {
		if !strings.Contains(string(r.Value), "workspace_id") {
			wantDead[string(r.Value)] = r
		}
	}

	p := newBinProcess(t).start(t, map[string]string{"SP_KAFKA_BROKERS": strings.Join(brokers, ","), "DLQ_EXAMPLE_TOPIC": topic, "DLQ_EXAMPLE_GROUP": topic},
		"run", filepath.Join(testenv.RepoRoot(t), "config", "examples", "dlq.yaml"))
	// Logs share stdout with the records; count only records.
	passed := func() int {
		n := 0
		for _, line := range strings.Split(p.stdout.String(), "\n") {
			if strings.HasPrefix(line, `{"v":1,"id":`) && strings.Contains(line, `"workspace_id":"w-1"`) {
				n++
			}
		}
		return n
	}

	dead := k.consume(t, dlq, len(wantDead), 2*time.Minute)
	if len(dead) != len(wantDead) {
		t.Fatalf("%d dead letters on %s, want %d", len(dead), dlq, len(wantDead))
	}
	for _, d := range dead {
		orig, ok := wantDead[string(d.Value)]
		if !ok {
			t.Errorf("unexpected dead letter %q", d.Value)
			continue
		}
		if string(d.Key) != string(orig.Key) {
			t.Errorf("dead letter %q has key %q, want the original %q", d.Value, d.Key, orig.Key)
		}
		var got []string
		for _, h := range d.Headers {
			got = append(got, h.Key+"="+string(h.Value))
		}
		sort.Strings(got)
		want := []string{fmt.Sprintf("source-offset=%s/%d/%d", topic, orig.Partition, orig.Offset), "trace=" + string(orig.Headers[0].Value)}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("dead letter %q has headers %v, want %v", d.Value, got, want)
		}
	}
	poll(30*time.Second, 100*time.Millisecond, func() bool { return passed() >= total-len(wantDead) })
	if got := passed(); got != total-len(wantDead) {
		t.Fatalf("%d good records carried on, want %d", got, total-len(wantDead))
	}
	p.stop(t) // how it exits is not what this test is about
}
