package tests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// interopReadKeysAndPartitions reads topic from the start with a client that
// is not ours and returns each record's key and partition.
func interopReadKeysAndPartitions(t *testing.T, brokers []string, topic string, want int) map[string]int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	var parse func(line string) (string, string, bool)
	skip := func(string) bool { return false }
	if kcat, err := exec.LookPath("kcat"); err == nil {
		cmd = exec.CommandContext(ctx, kcat, "-C", "-b", strings.Join(brokers, ","), "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k %p\n")
		parse = func(line string) (string, string, bool) {
			k, p, ok := strings.Cut(line, " ")
			return k, p, ok
		}
		t.Logf("reading %s with kcat (librdkafka)", topic)
	} else if script := filepath.Join(testenv.RepoRoot(t), "deploy", "local", "kafka-cli.sh"); fileExists(script) {
		cmd = exec.CommandContext(ctx, "bash", script, "kafka-console-consumer", "--bootstrap-server", strings.Join(brokers, ","),
			"--topic", topic, "--from-beginning", "--max-messages", strconv.Itoa(want), "--timeout-ms", "60000",
			"--formatter-property", "print.key=true", "--formatter-property", "print.partition=true", "--formatter-property", "print.value=false")
		// Partition:3<TAB>key
		parse = func(line string) (string, string, bool) {
			p, k, ok := strings.Cut(strings.TrimPrefix(line, "Partition:"), "\t")
			return strings.TrimSpace(k), p, ok
		}
		skip = func(line string) bool { return !strings.HasPrefix(line, "Partition:") }
		t.Logf("reading %s with the Java console consumer", topic)
	} else {
		testenv.Unavailable(t, "NEITHER kcat NOR deploy/local/kafka-cli.sh AVAILABLE for the interop check: install kcat (apt-get install kcat).")
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reading %s with %s: %v\n%s", topic, cmd.Path, err, out)
	}
	got := map[string]int32{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || skip(line) {
			continue
		}
		k, p, ok := parse(line)
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if !ok || err != nil {
			t.Fatalf("cannot read key and partition from %q", line)
		}
		got[k] = int32(n)
	}
	return got
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestOutputPartitionsLikeJavaForAnotherClient(t *testing.T) {
	t.Parallel()
	k := newTestKafka(t)
	brokers := k.brokers
	const partitions, records = 6, 300
	topic := uniqueName(t, "interop")
	k.create(t, partitions, topic)

	pipeline := filepath.Join(t.TempDir(), "interop.yaml")
	yaml := fmt.Sprintf(`
http:
  enabled: false
input:
  generate:
    count: %d
    interval: ""
    mapping: 'root = "ws-%%d:acct-%%d".format(counter() %% 7, counter())'
output:
  kafka_franz:
    topic: %s
    key: ${! content() }
    max_in_flight: 4
    batching:
      count: 50
      period: 50ms
`, records, topic)
	if err := os.WriteFile(pipeline, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runBin(t, map[string]string{"SP_KAFKA_BROKERS": strings.Join(brokers, ",")}, "run", pipeline)
	if code != 0 {
		t.Fatalf("speculapro run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	got := interopReadKeysAndPartitions(t, brokers, topic, records)
	if len(got) != records {
		t.Fatalf("read %d distinct keys, want %d", len(got), records)
	}
	used := map[int32]bool{}
	for key, p := range got {
		if want := testenv.JavaPartition([]byte(key), partitions); p != want {
			t.Errorf("key %q is on partition %d; the Java partitioner puts it on %d", key, p, want)
		}
		used[p] = true
	}
	if len(used) != partitions {
		t.Errorf("%d keys used %d of %d partitions", records, len(used), partitions)
	}

	t.Run("same partitions as the Java producer", func(t *testing.T) {
		script := filepath.Join(testenv.RepoRoot(t), "deploy", "local", "kafka-cli.sh")
		if !fileExists(script) {
			testenv.Unavailable(t, "deploy/local/kafka-cli.sh NOT AVAILABLE for the comparison with the Java producer.")
		}
		javaTopic := topic + "-java"
		newTestKafka(t).create(t, partitions, javaTopic)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var in strings.Builder
		for key := range got {
			fmt.Fprintf(&in, "%s|v\n", key)
		}
		cmd := exec.CommandContext(ctx, "bash", script, "kafka-console-producer", "--bootstrap-server", strings.Join(brokers, ","),
			"--topic", javaTopic, "--reader-property", "parse.key=true", "--reader-property", "key.separator=|")
		cmd.Stdin = strings.NewReader(in.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("producing with the Java console producer: %v\n%s", err, out)
		}
		javaGot := interopReadKeysAndPartitions(t, brokers, javaTopic, records)
		if len(javaGot) != records {
			t.Fatalf("the Java producer wrote %d distinct keys, want %d", len(javaGot), records)
		}
		for key, p := range got {
			if javaGot[key] != p {
				t.Errorf("key %q: ours on partition %d, the Java producer's on %d", key, p, javaGot[key])
			}
		}
	})
}
