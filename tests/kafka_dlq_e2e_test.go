package tests

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/testenv"
)

// TestDLQExamplePipeline runs config/examples/dlq.yaml against the real
// broker: flagged records land on the .dlq twin with their key, value and
// headers plus source-offset, and the others carry on.
func TestDLQExamplePipeline(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := kafkaE2EName(t, "dlq")
	dlq := topic + ".dlq"
	t.Cleanup(func() { kafkaE2EDeleteTopics(t, brokers, topic, dlq) })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := kafkaE2EAdmin(t, brokers)
	for _, tp := range []string{topic, dlq} {
		if resp, err := adm.CreateTopic(ctx, 3, -1, nil, tp); err != nil || resp.Err != nil {
			t.Fatalf("creating %s: %v %v", tp, err, resp.Err)
		}
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
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
	if err := prod.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	wantDead := map[string]*kgo.Record{} // by value
	for _, r := range records {
		if !strings.Contains(string(r.Value), "workspace_id") {
			wantDead[string(r.Value)] = r
		}
	}

	cmd := exec.CommandContext(ctx, testenv.Binary(t), "run", filepath.Join(testenv.RepoRoot(t), "config", "examples", "dlq.yaml"))
	cmd.Env = kafkaE2EEnv(brokers, "DLQ_EXAMPLE_TOPIC="+topic, "DLQ_EXAMPLE_GROUP="+topic)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var passed atomic.Int64
	scanned := make(chan struct{})
	go func() { // owns stdout until the process exits and closes it
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			// Logs share stdout with the records; count only records.
			if strings.HasPrefix(sc.Text(), `{"v":1,"id":`) && strings.Contains(sc.Text(), `"workspace_id":"w-1"`) {
				passed.Add(1)
			}
		}
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-scanned
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("pipeline stderr:\n%s", stderr.String())
		}
	}()

	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var dead []*kgo.Record
	for len(dead) < len(wantDead) && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		cons.PollFetches(pctx).EachRecord(func(r *kgo.Record) { dead = append(dead, r) })
		pcancel()
	}
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
	for deadline := time.Now().Add(30 * time.Second); passed.Load() < int64(total-len(wantDead)) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if got := passed.Load(); got != int64(total-len(wantDead)) {
		t.Fatalf("%d good records carried on, want %d", got, total-len(wantDead))
	}
}
