package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// privateKafkaStartWait bounds one broker start: a JVM start takes ~10 s on
// an idle machine but over a minute when the 2 cores are busy with tests
// (deploy/local/stack.sh waits as long).
const privateKafkaStartWait = 180 * time.Second

// privateKafkaStopWait bounds a clean (SIGTERM) stop before the broker is killed.
const privateKafkaStopWait = 45 * time.Second

// PrivateKafkaBroker is a single-node Apache Kafka broker (KRaft, combined
// broker and controller) of one test's own, started from the jars
// deploy/local/stack.sh installs, which the test may stop, kill, pause and
// start again (the shared broker must never be touched). Its data lives under
// t.TempDir(), so a restart keeps every topic and offset.
type PrivateKafkaBroker struct {
	t        testing.TB
	addr     string // PLAINTEXT listener, 127.0.0.1:<port>
	ctrlAddr string
	dir      string
	props    string
	libs     string
	confDir  string // deploy/local/kafka: log4j2 configs and the properties template
	logFile  string
	// nodeID, overrides and clusterID are set for a node of a
	// PrivateKafkaCluster: its KRaft node id, the properties it sets over the
	// template's, and the cluster id every node is formatted with (empty: a
	// single node, formatted --standalone).
	nodeID    int32
	overrides map[string]string
	clusterID string

	mu  sync.Mutex
	cmd *exec.Cmd
	// exited is closed when the running cmd has been waited for.
	exited chan struct{}
}

// Addr is the broker's bootstrap address (host:port), for SP_KAFKA_BROKERS.
func (k *PrivateKafkaBroker) Addr() string { return k.addr }

// Brokers is Addr as a seed list.
func (k *PrivateKafkaBroker) Brokers() []string { return []string{k.addr} }

// PrivateKafka starts a throwaway Kafka broker on free loopback ports and
// waits until it answers a metadata request listing itself. It is killed and
// removed when t ends (its log is printed if t failed). Auto topic creation
// is off, as on the shared broker: create topics with `speculapro topics` or
// kadm. It skips loudly (fails under SP_TEST_REQUIRE_SERVICES=1) when java or
// the jars are missing (`bash deploy/local/stack.sh up` installs both).
func PrivateKafka(t testing.TB) *PrivateKafkaBroker {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		Unavailable(t, "private Kafka NOT AVAILABLE (java is not installed; `bash deploy/local/stack.sh up` installs it).")
	}
	libs := kafkaLibs(t)
	if libs == "" {
		Unavailable(t, "private Kafka NOT AVAILABLE (no Kafka jars in .cache/kafka/<version>/libs; `bash deploy/local/stack.sh up` fetches them).")
	}
	root := RepoRoot(t)
	k := &PrivateKafkaBroker{
		t:        t,
		addr:     FreeAddr(t),
		ctrlAddr: FreeAddr(t),
		dir:      t.TempDir(),
		libs:     libs,
		confDir:  filepath.Join(root, "deploy", "local", "kafka"),
		nodeID:   1,
	}
	k.prepare()
	k.Start()
	return k
}

// prepare writes the broker's properties, formats its storage and registers
// its cleanup (killed, its log printed if the test failed).
func (k *PrivateKafkaBroker) prepare() {
	t := k.t
	t.Helper()
	k.props = filepath.Join(k.dir, "server.properties")
	k.logFile = filepath.Join(k.dir, "kafka.log")
	if err := k.writeConfig(); err != nil {
		t.Fatal(err)
	}
	if err := k.format(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.signal(syscall.SIGCONT)
		k.kill()
		if t.Failed() {
			k.tailLog()
		}
	})
}

// kafkaLibs finds the Kafka jars: SP_TEST_KAFKA_LIBS, else
// .cache/kafka/<version>/libs of this checkout, else of the main worktree
// this checkout belongs to (a `git worktree` shares the main one's cache).
func kafkaLibs(t testing.TB) string {
	if v := os.Getenv("SP_TEST_KAFKA_LIBS"); v != "" {
		return v
	}
	root := RepoRoot(t)
	version := ""
	if b, err := os.ReadFile(filepath.Join(root, "deploy", "local", "kafka", "pom.xml")); err == nil {
		if m := regexp.MustCompile(`<kafka\.version>([^<]+)</kafka\.version>`).FindSubmatch(b); m != nil {
			version = string(m[1])
		}
	}
	if version == "" {
		return ""
	}
	roots := []string{root}
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--path-format=absolute", "--git-common-dir").Output(); err == nil {
		roots = append(roots, filepath.Dir(strings.TrimSpace(string(out))))
	}
	for _, r := range roots {
		libs := filepath.Join(r, ".cache", "kafka", version, "libs")
		if _, err := os.Stat(filepath.Join(libs, ".complete")); err == nil {
			return libs
		}
	}
	return ""
}

// kafkaPropsPlaceholder is a value server.properties.template leaves to
// whoever writes the broker's properties.
var kafkaPropsPlaceholder = regexp.MustCompile(`@[A-Z_]+@`)

// writeConfig fills in deploy/local/kafka/server.properties.template, the
// properties stack.sh's kafka_write_config gives the shared broker, with this
// broker's ports and data dir, sized smaller: a private broker lives for one
// test, beside the shared one.
func (k *PrivateKafkaBroker) writeConfig() error {
	tmpl := filepath.Join(k.confDir, "server.properties.template")
	b, err := os.ReadFile(tmpl)
	if err != nil {
		return fmt.Errorf("reading the Kafka properties template: %w", err)
	}
	props := strings.NewReplacer(
		"@PLAINTEXT_ADDR@", k.addr,
		"@CONTROLLER_ADDR@", k.ctrlAddr,
		"@LOG_DIRS@", filepath.Join(k.dir, "data"),
		"@INTERNAL_TOPIC_PARTITIONS@", "3",
		"@IO_THREADS@", "2",
		"@RECOVERY_THREADS@", "1",
	).Replace(string(b))
	if p := kafkaPropsPlaceholder.FindString(props); p != "" {
		return fmt.Errorf("%s has a value PrivateKafka does not fill in: %s", tmpl, p)
	}
	props = overrideProps(props, k.overrides)
	props = "# Written by testenv.PrivateKafka from " + tmpl + ".\n" + props
	if err := os.WriteFile(k.props, []byte(props), 0o644); err != nil {
		return fmt.Errorf("writing private Kafka properties: %w", err)
	}
	return nil
}

func (k *PrivateKafkaBroker) java(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "java", append([]string{"-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", k.libs + "/*",
		"-Dlog4j2.configurationFile=" + filepath.Join(k.confDir, "tools-log4j2.properties")}, args...)...)
}

// format runs StorageTool as stack.sh's kafka_format does.
func (k *PrivateKafkaBroker) format() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id, err := []byte(k.clusterID), error(nil)
	if k.clusterID == "" {
		if id, err = k.java(ctx, "kafka.tools.StorageTool", "random-uuid").Output(); err != nil {
			return fmt.Errorf("private Kafka: StorageTool random-uuid: %w", err)
		}
	}
	args := []string{"kafka.tools.StorageTool", "format", "--standalone", "-t", strings.TrimSpace(string(id)), "-c", k.props}
	if k.clusterID != "" {
		// A node of a static three-voter quorum (controller.quorum.voters):
		// every node gets the same cluster id and none bootstraps alone.
		args = []string{"kafka.tools.StorageTool", "format", "-t", k.clusterID, "-c", k.props}
	}
	out, err := k.java(ctx, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("private Kafka: StorageTool format: %w\n%s", err, out)
	}
	return nil
}

// Start starts the broker (again, on the same ports and data) and waits until
// it answers. It fails the test if it does not within a generous bound.
func (k *PrivateKafkaBroker) Start() {
	k.t.Helper()
	k.waitReady(k.launch())
}

// launch starts the JVM without waiting for it to answer; the channel is
// closed when it exits.
func (k *PrivateKafkaBroker) launch() chan struct{} {
	k.t.Helper()
	k.mu.Lock()
	if k.cmd != nil {
		k.mu.Unlock()
		k.t.Fatal("private Kafka: Start while it is running")
	}
	out, err := os.OpenFile(filepath.Join(k.dir, "kafka.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		k.mu.Unlock()
		k.t.Fatal(err)
	}
	cmd := exec.Command("java", "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
		"-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile="+filepath.Join(k.confDir, "broker-log4j2.properties"),
		"-Dkafka.logs.dir="+k.dir,
		"-cp", k.libs+"/*", "kafka.Kafka", k.props)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a Ctrl-C of the test run must not reach the broker
	// before the test's cleanup does, and signals here go to the JVM alone.
	// Pdeathsig: a test binary killed by its timeout takes the broker along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		k.mu.Unlock()
		k.t.Fatalf("private Kafka: starting java: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(exited) }()
	k.cmd, k.exited = cmd, exited
	k.mu.Unlock()
	return exited
}

// waitReady waits until the launched broker answers, failing the test if it
// exits or does not answer within privateKafkaStartWait.
func (k *PrivateKafkaBroker) waitReady(exited chan struct{}) {
	k.t.Helper()
	deadline := time.Now().Add(privateKafkaStartWait)
	for {
		if err := k.ready(); err == nil {
			return
		} else if time.Now().After(deadline) {
			k.tailLog()
			k.t.Fatalf("private Kafka at %s did not answer within %s: %v", k.addr, privateKafkaStartWait, err)
		}
		select {
		case <-exited:
			k.mu.Lock()
			k.cmd = nil
			k.mu.Unlock()
			k.tailLog()
			k.t.Fatalf("private Kafka exited during startup")
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitAnswer waits, without failing anything, until the broker answers,
// exits or privateKafkaStartWait passes; waitReady then reports which.
func (k *PrivateKafkaBroker) waitAnswer(exited chan struct{}) {
	deadline := time.Now().Add(privateKafkaStartWait)
	for k.ready() != nil && time.Now().Before(deadline) {
		select {
		case <-exited:
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ready: the broker answers a metadata request and lists itself, which it only
// does once it has caught up with its KRaft log (an open port is not enough).
func (k *PrivateKafkaBroker) ready() error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.addr), kgo.RequestRetries(0),
		kgo.DialTimeout(2*time.Second), kgo.RequestTimeoutOverhead(3*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, b := range resp.Brokers {
		if b.NodeID == k.nodeID {
			return nil
		}
	}
	return errors.New("metadata does not list this broker yet")
}

// overrideProps sets each key of overrides in props (a properties file's
// text): a line of that key gets the new value, an empty value drops the
// line, and keys props lacks are appended.
func overrideProps(props string, overrides map[string]string) string {
	if len(overrides) == 0 {
		return props
	}
	done := map[string]bool{}
	var out []string
	for _, line := range strings.Split(props, "\n") {
		key, _, ok := strings.Cut(line, "=")
		v, over := overrides[strings.TrimSpace(key)]
		if !ok || strings.HasPrefix(strings.TrimSpace(line), "#") || !over {
			out = append(out, line)
			continue
		}
		done[strings.TrimSpace(key)] = true
		if v != "" {
			out = append(out, key+"="+v)
		}
	}
	keys := make([]string, 0, len(overrides))
	for key := range overrides {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if !done[key] && overrides[key] != "" {
			out = append(out, key+"="+overrides[key])
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// Stop stops the broker cleanly (SIGTERM: a controlled shutdown) and waits for
// it to exit; killed if it takes longer than 45 s.
func (k *PrivateKafkaBroker) Stop() {
	k.t.Helper()
	k.signal(syscall.SIGCONT) // a paused JVM cannot handle SIGTERM
	k.mu.Lock()
	cmd, exited := k.cmd, k.exited
	k.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(privateKafkaStopWait):
		k.t.Logf("private Kafka still running %s after SIGTERM: killing it", privateKafkaStopWait)
		_ = cmd.Process.Kill()
		<-exited
	}
	k.mu.Lock()
	k.cmd = nil
	k.mu.Unlock()
}

// Kill ends the broker with SIGKILL (a crash: the next Start recovers its log).
func (k *PrivateKafkaBroker) Kill() { k.kill() }

func (k *PrivateKafkaBroker) kill() {
	k.mu.Lock()
	cmd, exited := k.cmd, k.exited
	k.cmd = nil
	k.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Pause freezes the broker (SIGSTOP): connections stay open but nothing is
// answered, as with a hung broker or a network partition.
func (k *PrivateKafkaBroker) Pause() { k.signal(syscall.SIGSTOP) }

// Resume lets a paused broker run again (SIGCONT).
func (k *PrivateKafkaBroker) Resume() { k.signal(syscall.SIGCONT) }

func (k *PrivateKafkaBroker) signal(s syscall.Signal) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd != nil {
		_ = k.cmd.Process.Signal(s)
	}
}

func (k *PrivateKafkaBroker) tailLog() {
	for _, f := range []string{k.logFile, filepath.Join(k.dir, "kafka.out")} {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			continue
		}
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		k.t.Logf("private Kafka %s (last 6000 bytes):\n%s", filepath.Base(f), b)
	}
}
