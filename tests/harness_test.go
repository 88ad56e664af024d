package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/kafkatopics"
)

// Bounds of the waits every test shares; generous because the machine is
// shared.
const (
	waitBound = 90 * time.Second // a state the test waits for (rows stored, API ready)
	exitBound = 40 * time.Second // a process's exit after a signal
	runBound  = 2 * time.Minute  // a command that runs to completion
)

// Most of a test's time here is waiting (a broker starting, a group's
// session timeout, a database coming back), so a test that uses only what
// is its own (database, topic prefix and groups, Redis key prefix, private
// services it may stop, processes) and never stops or pauses a shared
// service calls t.Parallel(): go test runs those together, -parallel at a
// time (make test sets it), after every other test has finished. A test
// whose verdict depends on how busy the machine is (a latency bound, a
// fair share, a grace period, a fixed wait of a documented sequence) or
// that would starve the others stays serial, with a "Not parallel:" line
// saying why.

// binProcess is one run of a binary as its own process: speculapro unless
// using says otherwise, from the repository root, on the test's environment
// minus its SP_* variables (a developer's settings must not leak into a
// test), with its own loopback HTTP address as SP_HTTP_ADDR.
type binProcess struct {
	name     string // in messages
	bin      string // the executable; testenv.Binary when empty
	httpAddr string
	logFile  string              // when set, stdout and stderr go to this file
	stdout   *testenv.SyncBuffer // captured output, unless logFile is set
	stderr   *testenv.SyncBuffer
	cmd      *exec.Cmd
	exited   chan struct{}
}

// newBinProcess is a speculapro not yet started, with its HTTP address.
func newBinProcess(t testing.TB) *binProcess {
	return &binProcess{name: "speculapro", httpAddr: testenv.FreeAddr(t), stdout: &testenv.SyncBuffer{}, stderr: &testenv.SyncBuffer{}, exited: make(chan struct{})}
}

// named sets the name messages and logs use.
func (p *binProcess) named(name string) *binProcess {
	p.name = name
	return p
}

// using runs bin instead of speculapro.
func (p *binProcess) using(bin string) *binProcess {
	p.bin = bin
	return p
}

// toFile sends the output of a big run to path instead of memory; tail
// reads its end.
func (p *binProcess) toFile(path string) *binProcess {
	p.logFile, p.stdout, p.stderr = path, nil, nil
	return p
}

// start runs the binary with args and env on top of the SP_*-free
// environment. Cleanup kills it if the test did not end it, and shows its
// output (the end of it, for a file) when the test failed.
func (p *binProcess) start(t testing.TB, env map[string]string, args ...string) *binProcess {
	t.Helper()
	bin := p.bin
	if bin == "" {
		bin = testenv.Binary(t)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = testenv.RepoRoot(t)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SP_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, "SP_HTTP_ADDR="+p.httpAddr)
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	var out *os.File
	if p.logFile != "" {
		var err error
		if out, err = os.Create(p.logFile); err != nil {
			t.Fatal(err)
		}
		p.cmd.Stdout, p.cmd.Stderr = out, out
	} else {
		p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	}
	if err := p.cmd.Start(); err != nil {
		if out != nil {
			out.Close()
		}
		t.Fatalf("starting %s: %v", p.name, err)
	}
	// The waiter owns cmd.Wait and ends with the process, which cleanup
	// kills at the latest.
	go func() {
		_ = p.cmd.Wait()
		if out != nil {
			out.Close()
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if !t.Failed() {
			return
		}
		if p.logFile != "" {
			t.Logf("--- end of %s's output:\n%s", p.name, p.tail(4000))
		} else {
			t.Logf("%s stdout:\n%s\nstderr:\n%s", p.name, p.stdout, p.stderr)
		}
	})
	return p
}

// runBin runs speculapro args to completion (bounded by runBound) and
// returns what it printed and its exit code.
func runBin(t testing.TB, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	p := newBinProcess(t).start(t, env, args...)
	code = p.waitExit(t, runBound)
	return p.stdout.String(), p.stderr.String(), code
}

// runArgs runs pipeline as `speculapro run`, with the HTTP server on the
// process's loopback address (a pipeline file carries no http section).
func (p *binProcess) runArgs(pipeline string) []string {
	return []string{"run", "--set", "http.address=" + p.httpAddr, pipeline}
}

// tail is the last n bytes of the output.
func (p *binProcess) tail(n int) string {
	var b []byte
	if p.logFile != "" {
		b, _ = os.ReadFile(p.logFile)
	} else {
		b = []byte(p.stdout.String() + p.stderr.String())
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func (p *binProcess) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// waitExit waits for the process to end and returns its exit code.
func (p *binProcess) waitExit(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(within):
		t.Fatalf("%s still running after %s:\n%s", p.name, within, p.tail(2000))
	}
	return p.cmd.ProcessState.ExitCode()
}

// stop sends SIGTERM and returns the exit code.
func (p *binProcess) stop(t testing.TB) int {
	t.Helper()
	return p.signal(t, syscall.SIGTERM, exitBound)
}

// interrupt sends SIGINT, as Ctrl-C would, and returns the exit code.
func (p *binProcess) interrupt(t testing.TB) int {
	t.Helper()
	return p.signal(t, syscall.SIGINT, exitBound)
}

// kill sends SIGKILL (no shutdown, no commit, no leave) and returns the
// exit code.
func (p *binProcess) kill(t testing.TB) int {
	t.Helper()
	return p.signal(t, syscall.SIGKILL, exitBound)
}

// signal sends sig and waits (bounded) for the exit code; a process that
// is already gone fails the test, as it should have been running.
func (p *binProcess) signal(t testing.TB, sig syscall.Signal, within time.Duration) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		if !p.running() {
			t.Fatalf("%s exited by itself (code %d) before %v:\n%s", p.name, p.cmd.ProcessState.ExitCode(), sig, p.tail(3000))
		}
		t.Fatalf("sending %v to %s: %v", sig, p.name, err)
	}
	return p.waitExit(t, within)
}

// peakRSS is the process's peak resident set (VmHWM) in bytes, for a
// benchmark's report; read it before the process ends.
func (p *binProcess) peakRSS(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("reading the status of %s: %v", p.name, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("VmHWM of %s: %v", p.name, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in the status of %s", p.name)
	return 0
}

// ready is the status code of the engine's /ready (0 when it does not
// answer): 200 while every input and output is connected, 503 otherwise.
func (p *binProcess) ready() int {
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + p.httpAddr + "/ready")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// scrape fetches /metrics; an error means not (or no longer) served.
func (p *binProcess) scrape() (string, error) {
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/metrics: %d %v", resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return "", fmt.Errorf("/metrics content type %q, want Prometheus text", ct)
	}
	return string(body), nil
}

// saveCPUProfile saves a CPU profile of seconds of the process's work
// (it must run with http.debug_endpoints) to path, for a benchmark; a
// failure is logged, as the profile is a by-product of the measurement.
func saveCPUProfile(b *testing.B, p *binProcess, what, path string, seconds int) {
	saveProfile(b, p, "profile", what, path, seconds)
}

// saveProfile saves the process's pprof profile of kind ("profile" for
// CPU, "allocs" for what was allocated) over seconds to path.
func saveProfile(b *testing.B, p *binProcess, kind, what, path string, seconds int) {
	client := http.Client{Timeout: max(time.Minute, time.Duration(seconds+30)*time.Second)}
	resp, err := client.Get(fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", p.httpAddr, kind, seconds))
	if err != nil {
		b.Logf("%s profile: %v", kind, err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Logf("%s profile: status %d, %v", kind, resp.StatusCode, err)
		return
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Logf("%s profile: %v", kind, err)
		return
	}
	b.Logf("%s profile of %d s of %s saved to %s (go tool pprof -top %s)", kind, seconds, what, path, path)
}

// metricSum adds up every sample of metric in a scrape whose labels include
// every one of labels (`name="value"`); with no labels, every sample.
func metricSum(scrape, metric string, labels ...string) float64 {
	var sum float64
	for _, line := range strings.Split(scrape, "\n") {
		var set string
		switch {
		case strings.HasPrefix(line, metric+"{"):
			set = line[len(metric)+1 : strings.LastIndexByte(line, '}')]
		case strings.HasPrefix(line, metric+" "):
		default:
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(","+set+",", ","+l+",") {
				ok = false
			}
		}
		if ok {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// metricLines are the lines of a scrape that start with prefix, to show
// in a failure.
func metricLines(scrape, prefix string) string {
	var out []string
	for _, l := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// fullScale reports whether SP_TEST_SCALE=full asks for the full sizes
// (make chaos, make bench); by default the load tests stay modest.
func fullScale() bool { return os.Getenv("SP_TEST_SCALE") == "full" }

// poll calls done every interval until it returns true, and reports
// whether it did before within passed.
func poll(within, every time.Duration, done func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if done() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
}

// waitUntil polls cond every 200ms until it returns nil, failing the test
// with cond's last error once timeout has passed.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	var err error
	if !poll(timeout, 200*time.Millisecond, func() bool { err = cond(); return err == nil }) {
		t.Fatalf("waited %v for %s: %v", timeout, what, err)
	}
}

// uniqueName is "t-<what>-<random hex>", a name no other test or engineer
// uses, fit for a topic, a topic prefix or a consumer group.
func uniqueName(t testing.TB, what string) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	what = strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(what, "-"))
	return fmt.Sprintf("t-%s-%s", what, hex.EncodeToString(b))
}

// persistRoleError is the one line the persist, stream and worker roles
// refuse to start with when their database role is bound by row-level
// security.
const persistRoleError = "error: persist/stream/worker roles: database role cannot bypass row-level security (set SP_DB_SYSTEM_URL to the speculapro_system role)"

// requireRoleRefusal waits for p to exit and fails the test unless it exited
// non-zero with persistRoleError as a whole line of its stderr.
func requireRoleRefusal(t *testing.T, p *binProcess) {
	t.Helper()
	if code := p.waitExit(t, exitBound); code == 0 {
		t.Fatalf("exit code 0, want non-zero")
	}
	if !slices.Contains(strings.Split(p.stderr.String(), "\n"), persistRoleError) {
		t.Fatalf("stderr lacks the exact line\n%s\nstderr:\n%s", persistRoleError, p.stderr)
	}
}

// privateKafkaWithTopics starts a real broker of the test's own (which it
// may stop, kill or pause: the shared one must never be) and makes the
// product's topics under prefix on it, with 3 partitions, as `speculapro
// topics` would.
func privateKafkaWithTopics(t testing.TB, prefix string) *testenv.PrivateKafkaBroker {
	t.Helper()
	broker := testenv.PrivateKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(cl)
	res, err := kafkatopics.Ensure(ctx, adm, kafkatopics.Spec{Prefix: prefix, Partitions: 3, ReplicationFactor: -1})
	if err != nil || len(res.Refused) > 0 {
		t.Fatalf("creating topics %s* on the private broker: %v %v", prefix, err, res.Refused)
	}
	waitServed(t, adm, 3, kafkatopics.Names(prefix)...)
	return broker
}

// waitServed waits (bounded) until the broker serves every one of topics
// in its metadata, each with partitions partitions and a leader for each:
// a broker answers CreateTopics once its controller has them, and on a
// busy machine a producer asking a moment later is still told
// UNKNOWN_TOPIC_OR_PARTITION.
func waitServed(t testing.TB, adm *kadm.Client, partitions int, topics ...string) {
	t.Helper()
	waitUntil(t, 30*time.Second, fmt.Sprintf("%d topics served with %d partitions each", len(topics), partitions), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		details, err := adm.ListTopics(ctx, topics...)
		if err != nil {
			return err
		}
		for _, n := range topics {
			d, ok := details[n]
			if !ok || d.Err != nil || len(d.Partitions) != partitions {
				return fmt.Errorf("topic %s: listed %v, err %v, %d partitions; want it with %d partitions", n, ok, d.Err, len(d.Partitions), partitions)
			}
			for _, p := range d.Partitions {
				if p.Err != nil || p.Leader < 0 {
					return fmt.Errorf("topic %s partition %d: leader %d, err %v", n, p.Partition, p.Leader, p.Err)
				}
			}
		}
		return nil
	})
}

// testKafka is a client of the real broker that deletes, at cleanup, the
// topics and consumer groups the test made (and only those).
type testKafka struct {
	brokers []string
	client  *kgo.Client
	adm     *kadm.Client
	topics  []string
	groups  []string
}

func newTestKafka(t testing.TB) *testKafka {
	t.Helper()
	k := &testKafka{brokers: testenv.KafkaBrokers(t)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	k.client, k.adm = cl, kadm.NewClient(cl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if len(k.topics) > 0 {
			resps, err := k.adm.DeleteTopics(ctx, k.topics...)
			if err != nil {
				t.Errorf("deleting topics %v: %v", k.topics, err)
			}
			for _, r := range resps {
				if r.Err != nil && !strings.Contains(r.Err.Error(), "UNKNOWN_TOPIC") {
					t.Errorf("deleting topic %s: %v", r.Topic, r.Err)
				}
			}
		}
		// A killed member keeps a group non-empty until its session
		// times out; such a group is left to the broker's expiry.
		if len(k.groups) > 0 {
			_, _ = k.adm.DeleteGroups(ctx, k.groups...)
		}
		cl.Close()
	})
	return k
}

// own marks topics (made by the binary) and groups for deletion at cleanup.
func (k *testKafka) own(topics, groups []string) {
	k.topics = append(k.topics, topics...)
	k.groups = append(k.groups, groups...)
}

// create makes topics with partitions partitions (deleted at cleanup).
func (k *testKafka) create(t testing.TB, partitions int32, topics ...string) {
	t.Helper()
	k.own(topics, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := k.adm.CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		t.Fatalf("creating topics %v: %v", topics, err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("creating topic %s: %v", r.Topic, r.Err)
		}
	}
	waitServed(t, k.adm, int(partitions), topics...)
}

// createAll makes the product's 16 topics under prefix, as `speculapro
// topics` would (deleted at cleanup).
func (k *testKafka) createAll(t testing.TB, prefix string, partitions int32) {
	t.Helper()
	k.own(kafkatopics.Names(prefix), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := kafkatopics.Ensure(ctx, k.adm, kafkatopics.Spec{Prefix: prefix, Partitions: partitions, ReplicationFactor: -1})
	if err != nil || len(res.Refused) > 0 {
		t.Fatalf("creating topics %s*: %v %v", prefix, err, res.Refused)
	}
	waitServed(t, k.adm, int(partitions), kafkatopics.Names(prefix)...)
}

// produce writes records (each with its Topic) and waits until Kafka has
// them.
func (k *testKafka) produce(t testing.TB, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := k.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing %d records: %v", len(recs), err)
	}
}

// consume reads topic from the start until want records arrived (or
// within passed), then a moment more, and returns them all: anything
// beyond want would be a duplicate.
func (k *testKafka) consume(t testing.TB, topic string, want int, within time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	deadline := time.Now().Add(within)
	for len(got) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		f := cl.PollFetches(ctx)
		cancel()
		f.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	cancel()
	return got
}

// committed is the group's committed offsets by topic and partition
// (partitions without a commit left out).
func (k *testKafka) committed(t testing.TB, group string) map[string]map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	offs, err := k.adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetching offsets of %s: %v", group, err)
	}
	out := map[string]map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			if out[o.Topic] == nil {
				out[o.Topic] = map[int32]int64{}
			}
			out[o.Topic][o.Partition] = o.At
		}
	})
	return out
}

// endOffsets is, per partition of topic, the offset the next record gets.
func (k *testKafka) endOffsets(t testing.TB, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ends, err := k.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("listing end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}
