package tests

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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

// kfiE2EStart runs the consuming pipeline as process name, writing the
// records it consumes to <dir>/out-<name>.txt and its log to <dir>/<name>.log.
func kfiE2EStart(t *testing.T, dir, name, pipeline string) *binProcess {
	t.Helper()
	env := map[string]string{"SP_TEST_E2E_OUT": filepath.Join(dir, "out-"+name+".txt")}
	// The pipeline's log level may be raised to replay a failure.
	if v := os.Getenv("SP_TEST_E2E_LOG_LEVEL"); v != "" {
		env["SP_TEST_E2E_LOG_LEVEL"] = v
	}
	return newBinProcess(t).named(name).toFile(filepath.Join(dir, name+".log")).start(t, env, "run", pipeline)
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
	t.Parallel()
	n := 20000
	if fullScale() {
		n = 100000
	}
	k := newTestKafka(t)
	brokers, adm := k.brokers, k.adm
	topic := uniqueName(t, "kfi")
	group := topic + "-group"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k.create(t, kfiE2EPartitions, topic)
	k.own(nil, []string{group})

	for from := 0; from < n; from += 5000 {
		var recs []*kgo.Record
		for i := from; i < min(from+5000, n); i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "ws-1:acct-%d", i%997), Value: fmt.Appendf(nil, `{"i":%d}`, i)})
		}
		k.produce(t, recs...)
	}
	ends := k.endOffsets(t, topic)
	var total int64
	for _, end := range ends {
		total += end
	}
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

	start := time.Now()
	a := kfiE2EStart(t, dir, "a", pipeline)
	b := kfiE2EStart(t, dir, "b", pipeline)
	var a2 *binProcess

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
			a.kill(t) // no commit, no leave
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
	for _, p := range []*binProcess{b, a2} {
		if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Errorf("process %s exited with %d on SIGTERM", p.name, code)
		}
	}
	progress.update(t, outs)
	for _, bad := range progress.bad {
		t.Errorf("unreadable output: %s", bad)
	}
	t.Logf("%d records in %d partitions: all written and committed after %s (kill at %s); %d lines written (%d delivered again), %d offset samples, none past an unwritten record",
		n, kfiE2EPartitions, elapsed.Round(time.Millisecond), killedAt.Round(time.Millisecond), progress.lines, progress.lines-n, samples)
}
