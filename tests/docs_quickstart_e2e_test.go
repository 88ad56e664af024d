package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/kafkatopics"
)

// The pages' command sequences are run as typed, from the Markdown itself,
// so a page cannot tell a new user something that no longer works. The test
// sets only what the commands read from the environment (addresses, a
// database, a topic prefix, groups, a Redis key prefix), never the commands.

// docsScriptBound bounds one sequence, waits included.
const docsScriptBound = 3 * time.Minute

// The rules of the starter pack that a first payment of 6,000 EUR to a new
// payee fires, as both pages say.
var docsFiredRules = []string{"large_amount_to_new_counterparty", "round_amount", "dormant_account_active"}

// TestDocsReadmeQuickStart runs the README's quick start against `speculapro
// dev`, started as `make run` starts it (after the stack), with its own
// database, data folder, ports and Redis key prefix.
func TestDocsReadmeQuickStart(t *testing.T) {
	// Not parallel: the page's sequence gives the rule hits a fixed 5 s.
	script := docsBlock(t, "README.md", "quickstart")
	db := dbtest.NewBootstrapped(t)
	ingestAddr := testenv.FreeAddr(t)
	env := map[string]string{
		"SP_DB_SUPERUSER_URL":      testenv.PostgresSuperuserURL(t),
		"SP_DB_OWNER_URL":          db.OwnerURL,
		"SP_DB_URL":                db.AppURL,
		"SP_DB_SYSTEM_URL":         db.SystemURL,
		"SP_DATA_DIR":              t.TempDir(),
		"SP_INGEST_ADDR":           ingestAddr,
		"SP_DECISION_ADDR":         testenv.FreeAddr(t),
		"SP_CASE_ADDR":             testenv.FreeAddr(t),
		"SP_REDIS_KEY_PREFIX":      uniqueName(t, "qs") + ":",
		"SP_DECISION_SPOOL_PREFIX": uniqueName(t, "qs") + ":",
	}
	testenv.RedisURL(t)
	dev := newBinProcess(t).named("speculapro dev").start(t, env, "dev", "--kafka-addr", testenv.FreeAddr(t))
	// A user starts typing once make run has printed its addresses and the
	// pipelines are up.
	waitUntil(t, waitBound, "speculapro dev to be ready", func() error {
		if !dev.running() {
			return errors.New("speculapro dev exited")
		}
		if code := dev.ready(); code != 200 {
			return fmt.Errorf("/ready answers %d", code)
		}
		return nil
	})
	out, _ := docsRun(t, script, map[string]string{
		"SP_DB_URL":        db.AppURL,
		"SP_DB_SYSTEM_URL": db.SystemURL,
		"SP_INGEST_ADDR":   ingestAddr,
	})
	docsRequire(t, out, `"accepted":1`, "t-1", "6000.0000", "EUR")
	docsRequire(t, out, docsFiredRules...)
	devStop(t, dev)
}

// TestDocsGettingStartedByHand runs docs/getting-started.md's "Run every role by
// hand" sequence against the local stack's real Kafka: its own database (made
// by the sequence's migrate --bootstrap), topic prefix, groups, metrics
// ports and home folder for the keys file.
func TestDocsGettingStartedByHand(t *testing.T) {
	// Not parallel: the page's sequence gives the rule hits a fixed 5 s.
	script := docsBlock(t, "docs/getting-started.md", "by-hand")
	super := testenv.PostgresSuperuserURL(t)
	testenv.RedisURL(t)
	k := newTestKafka(t)
	prefix := uniqueName(t, "byhand") + "."
	persistGroup, streamGroup := uniqueName(t, "byhand-persist"), uniqueName(t, "byhand-stream")
	k.own(kafkatopics.Names(prefix), []string{persistGroup, persistGroup + "-events", streamGroup, streamGroup + "-events"})

	dbName := strings.ReplaceAll(uniqueName(t, "byhand"), "-", "_")
	t.Cleanup(func() { dbtest.Drop(t, super, dbName) })
	home := t.TempDir()
	out, dir := docsRun(t, script, map[string]string{
		"HOME":                     home,
		"SP_KAFKA_BROKERS":         strings.Join(k.brokers, ","),
		"SP_KAFKA_TOPIC_PREFIX":    prefix,
		"SP_PERSIST_GROUP":         persistGroup,
		"SP_STREAM_GROUP":          streamGroup,
		"SP_DB_SUPERUSER_URL":      super,
		"SP_DB_OWNER_URL":          dbtest.RoleURL(t, super, dbmigrate.OwnerRole, dbName),
		"SP_DB_URL":                dbtest.RoleURL(t, super, dbmigrate.AppRole, dbName),
		"SP_DB_SYSTEM_URL":         dbtest.RoleURL(t, super, dbmigrate.SystemRole, dbName),
		"SP_REDIS_KEY_PREFIX":      prefix,
		"SP_DECISION_SPOOL_PREFIX": prefix,
		"SP_INGEST_ADDR":           testenv.FreeAddr(t),
		"SP_DECISION_ADDR":         testenv.FreeAddr(t),
		"SP_CASE_ADDR":             testenv.FreeAddr(t),
		"METRICS_PORT":             strconv.Itoa(freePortRun(t, 5)),
	})
	docsRequire(t, out, "created database "+dbName, "created "+prefix+"txn.ingested", "created large_amount_to_new_counterparty v1")
	docsRequire(t, out, `"accepted":1`, "t-1", "6000.0000", "EUR")
	docsRequire(t, out, docsFiredRules...)
	docsRequire(t, out, "high", "(3 rows)")

	// The keys file is the user's alone; the role logs are where the page
	// says, not in the folder the commands were typed in.
	keys := filepath.Join(home, ".config", "speculapro", "keys.env")
	if st, err := os.Stat(keys); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the keys file %s: %v, want mode 0600", keys, err)
	}
	for _, role := range []string{"ingest", "persist", "stream", "worker", "decision"} {
		if _, err := os.Stat(filepath.Join(dir, ".speculapro", "logs", role+".log")); err != nil {
			t.Errorf("the %s role's log is not in .speculapro/logs/: %v", role, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "bin", "config", "pipelines", ".speculapro":
		default:
			t.Errorf("the sequence left %s in the folder it was typed in", e.Name())
		}
	}
}

// docsBlock returns the shell code between <!-- name:begin --> and
// <!-- name:end --> of page (a path from the repository root): the body of
// the one ```sh block there.
func docsBlock(t *testing.T, page, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), filepath.FromSlash(page)))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- "+name+":begin -->")
	block, _, ok2 := strings.Cut(rest, "<!-- "+name+":end -->")
	if !ok || !ok2 {
		t.Fatalf("%s lacks the <!-- %s:begin --> … <!-- %s:end --> markers", page, name, name)
	}
	block = strings.TrimSpace(block)
	if !strings.HasPrefix(block, "```sh\n") || !strings.HasSuffix(block, "\n```") {
		t.Fatalf("%s: the %s markers must hold exactly one ```sh block, found:\n%s", page, name, block)
	}
	return strings.TrimSuffix(strings.TrimPrefix(block, "```sh\n"), "```")
}

// docsWorkDir is a folder laid out like a checkout after `make build`:
// bin/speculapro (the binary the tests built) and the repository's config/
// and pipelines/, so the commands run as typed in the repository's root
// while what they write lands in the test's folder.
func docsWorkDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	root := testenv.RepoRoot(t)
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		filepath.Join(dir, "bin", "speculapro"): testenv.Binary(t),
		filepath.Join(dir, "config"):            filepath.Join(root, "config"),
		filepath.Join(dir, "pipelines"):         filepath.Join(root, "pipelines"),
	}
	for link, target := range links {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// docsRun runs script with bash in a fresh docsWorkDir, on the test's
// environment minus its SP_* variables plus env, and returns what it printed;
// it fails the test when the script fails or outlasts docsScriptBound. It
// also returns the folder the script ran in.
func docsRun(t *testing.T, script string, env map[string]string) (string, string) {
	t.Helper()
	dir := docsWorkDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), docsScriptBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Its own process group, so that a timeout also ends the roles it
	// started in the background.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	out, err := cmd.CombinedOutput()
	t.Logf("output of the sequence:\n%s", out)
	if ctx.Err() != nil {
		t.Fatalf("the sequence did not finish within %s", docsScriptBound)
	}
	if err != nil {
		t.Fatalf("the sequence failed: %v", err)
	}
	if entries, err := os.ReadDir(filepath.Join(dir, ".speculapro", "logs")); err == nil {
		for _, e := range entries {
			if b, err := os.ReadFile(filepath.Join(dir, ".speculapro", "logs", e.Name())); err == nil {
				t.Logf("--- %s:\n%s", e.Name(), b)
			}
		}
	}
	return string(out), dir
}

// docsRequire fails the test unless out contains every one of want.
func docsRequire(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the sequence's output lacks %q", w)
		}
	}
}

// freePortRun returns the first of n consecutive free loopback ports.
func freePortRun(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		_, p, _ := net.SplitHostPort(testenv.FreeAddr(t))
		base, _ := strconv.Atoi(p)
		free := true
		for i := 1; i < n && free; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatalf("found no %d consecutive free ports", n)
	return 0
}
