package tests

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/testenv"
)

// kfiE2EPartitions is the test topic's partition count.
const kfiE2EPartitions = 6

// kfiE2EProgress is what the outputs have written so far, read from their
// files: per partition, which offsets were seen and the lowest one not yet.
type kfiE2EProgress struct {
	ends  map[int32]int64
	seen  map[int32][]bool
	low   map[int32]int64 // every offset below it was written
	lines int             // lines written in all, duplicates included
	read  map[string]int64
	bad   []string
}

func newKfiE2EProgress(ends map[int32]int64) *kfiE2EProgress {
	p := &kfiE2EProgress{ends: ends, seen: map[int32][]bool{}, low: map[int32]int64{}, read: map[string]int64{}}
	for part, end := range ends {
		p.seen[part] = make([]bool, end)
	}
	return p
}

// update reads what the files gained since the last call. Only complete
// lines count: a process killed mid-write leaves a partial last line, and
// its record was not acked, so it is delivered again anyway.
func (p *kfiE2EProgress) update(t *testing.T, files []string) {
	t.Helper()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatalf("reading output %s: %v", f, err)
		}
		from := p.read[f]
		chunk := data[from:]
		last := bytes.LastIndexByte(chunk, '\n')
		if last < 0 {
			continue
		}
		for _, line := range strings.Split(string(chunk[:last]), "\n") {
			ps, offStr, ok := strings.Cut(line, " ")
			part, err1 := strconv.ParseInt(ps, 10, 32)
			off, err2 := strconv.ParseInt(offStr, 10, 64)
			if !ok || err1 != nil || err2 != nil || off < 0 || off >= p.ends[int32(part)] {
				p.bad = append(p.bad, fmt.Sprintf("%s: line %q", filepath.Base(f), line))
				continue
			}
			p.seen[int32(part)][off] = true
			p.lines++
		}
		p.read[f] = from + int64(last) + 1
	}
	for part, seen := range p.seen {
		low := p.low[part]
		for low < int64(len(seen)) && seen[low] {
			low++
		}
		p.low[part] = low
	}
}

func (p *kfiE2EProgress) complete() bool {
	for part, end := range p.ends {
		if p.low[part] < end {
			return false
		}
	}
	return true
}

func (p *kfiE2EProgress) distinct() int64 {
	var n int64
	for _, low := range p.low {
		n += low
	}
	return n
}

// kfiE2EProcess is one `speculapro run` of the consuming pipeline.
type kfiE2EProcess struct {
	name    string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has exited
	waitErr error         // how it exited, set before exited closes
}

func kfiE2EStart(t *testing.T, dir, name, pipeline string) *kfiE2EProcess {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.Binary(t), "run", pipeline)
	cmd.Env = append(os.Environ(), "SP_TEST_E2E_OUT="+filepath.Join(dir, "out-"+name+".txt"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &kfiE2EProcess{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// stop asks for a graceful shutdown and waits for it, bounded.
func (p *kfiE2EProcess) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.waitErr != nil {
			t.Errorf("process %s exited with %v on SIGTERM", p.name, p.waitErr)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("process %s did not stop within 30s of SIGTERM", p.name)
	}
}

// kfiE2EKeepLogs shows the end of every process log of a failed run.
func kfiE2EKeepLogs(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		t.Logf("--- last lines of %s:\n%s", filepath.Base(l), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

const kfiE2EPipeline = `
http:
  enabled: false
logger:
  level: ${SP_TEST_E2E_LOG_LEVEL:info}
  format: logfmt
input:
  kafka_franz:
    seed_brokers: [ %q ]
    topics: [ %q ]
    consumer_group: %q
    checkpoint_limit: %d
    commit_period: 200ms
    session_timeout: 6s
    rebalance_timeout: 15s
    revoke_wait: 5s
    batching:
      count: %d
      period: 50ms
pipeline:
  threads: 2
  processors:
    # 250ms per batch (sleep waits per message), slow enough that the
    # kill lands mid-stream whatever the scale.
    - sleep:
        duration: '${! if batch_index() == 0 { "250ms" } else { "0s" } }'
    - mapping: 'root = meta("kafka_partition") + " " + meta("kafka_offset")'
output:
  file:
    path: ${SP_TEST_E2E_OUT}
    codec: lines
`

// TestKafkaInputNeverCommitsPastUnprocessedRecords consumes a topic of the
// real broker with two processes of the real binary in one group, SIGKILLs
// one at a random moment and restarts it. Every record must be written at
// least once, and a committed offset must never pass a record that no
// output had written when the offset was read.
func TestKafkaInputNeverCommitsPastUnprocessedRecords(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	n := 20000
	if os.Getenv("SP_TEST_SCALE") == "full" {
		n = 100000
	}
	topic := kafkaE2EName(t, "kfi")
	group := topic + "-group"
	adm := kafkaE2EAdmin(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	if _, err := adm.CreateTopic(ctx, kfiE2EPartitions, -1, nil, topic); err != nil {
		t.Fatalf("creating topic %s: %v", topic, err)
	}
	t.Cleanup(func() {
		kafkaE2EDeleteTopics(t, brokers, topic)
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_, _ = adm.DeleteGroup(dctx, group)
	})

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	for from := 0; from < n; from += 5000 {
		var recs []*kgo.Record
		for i := from; i < min(from+5000, n); i++ {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "ws-1:acct-%d", i%997), Value: fmt.Appendf(nil, `{"i":%d}`, i)})
		}
		if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("producing records %d..: %v", from, err)
		}
	}
	producer.Close()
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("listing end offsets: %v", err)
	}
	ends := map[int32]int64{}
	var total int64
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset; total += o.Offset })
	if len(ends) != kfiE2EPartitions || total != int64(n) {
		t.Fatalf("topic holds %d records in %d partitions, want %d in %d", total, len(ends), n, kfiE2EPartitions)
	}

	dir := t.TempDir()
	batch := n / 200
	pipeline := filepath.Join(dir, "consume.yaml")
	yaml := fmt.Sprintf(kfiE2EPipeline, strings.Join(brokers, ","), topic, group, batch, batch)
	if err := os.WriteFile(pipeline, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	outs := []string{filepath.Join(dir, "out-a.txt"), filepath.Join(dir, "out-b.txt"), filepath.Join(dir, "out-a2.txt")}

	t.Cleanup(func() {
		if t.Failed() {
			kfiE2EKeepLogs(t, dir)
		}
	})
	start := time.Now()
	a := kfiE2EStart(t, dir, "a", pipeline)
	b := kfiE2EStart(t, dir, "b", pipeline)
	var a2 *kfiE2EProcess

	progress := newKfiE2EProgress(ends)
	killAt := int64(n/10 + rand.IntN(n/2))
	var (
		killedAt  time.Duration
		samples   int
		committed map[int32]int64
	)
	deadline := time.Now().Add(150 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("not done after %s: %d of %d records written, committed %v; logs in %s", time.Since(start).Round(time.Second), progress.distinct(), n, committed, dir)
		}
		// Offsets first, files second: whatever was committed at this
		// instant had been written, and stays written, before the read.
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil && ctx.Err() == nil {
			t.Logf("sampling offsets: %v", err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		committed = map[int32]int64{}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == topic && o.Err == nil && o.At >= 0 {
				committed[o.Partition] = o.At
			}
		})
		progress.update(t, outs)
		samples++
		for part, c := range committed {
			if c > progress.low[part] {
				t.Fatalf("partition %d committed at %d but offset %d was not written by any output (sample %d at %s)",
					part, c, progress.low[part], samples, time.Since(start).Round(time.Millisecond))
			}
		}
		if a2 == nil && progress.distinct() >= killAt {
			_ = a.cmd.Process.Kill() // SIGKILL: no commit, no leave
			<-a.exited
			killedAt = time.Since(start)
			t.Logf("SIGKILLed process a after %s with %d records written", killedAt.Round(time.Millisecond), progress.distinct())
			time.Sleep(500 * time.Millisecond)
			a2 = kfiE2EStart(t, dir, "a2", pipeline)
		}
		done := progress.complete() && len(committed) == kfiE2EPartitions
		for part, end := range ends {
			done = done && committed[part] == end
		}
		if done {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if a2 == nil {
		t.Fatalf("the run finished before the kill at %d records; the test did not exercise a crash", killAt)
	}
	b.stop(t)
	a2.stop(t)
	progress.update(t, outs)
	for _, bad := range progress.bad {
		t.Errorf("unreadable output: %s", bad)
	}
	t.Logf("%d records in %d partitions: all written and committed after %s (kill at %s); %d lines written (%d delivered again), %d offset samples, none past an unwritten record",
		n, kfiE2EPartitions, elapsed.Round(time.Millisecond), killedAt.Round(time.Millisecond), progress.lines, progress.lines-n, samples)
}
