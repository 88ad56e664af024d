package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/config"
)

// defaultKafka is the broker of deploy/local/stack.sh. The PostgreSQL and
// Redis URLs come from internal/config, whose defaults match the stack too.
const defaultKafka = "127.0.0.1:19092"

// PostgresSuperuserURL returns a superuser URL of the test PostgreSQL
// (SP_DB_SUPERUSER_URL), skipping the test loudly when it does not answer.
func PostgresSuperuserURL(t testing.TB) string {
	u := config.DBSuperuserURL.Value()
	requireTCP(t, "PostgreSQL", hostOf(t, u, "127.0.0.1:5432"))
	return u
}

// RedisURL returns the test Redis URL (SP_REDIS_URL), skipping loudly when absent.
func RedisURL(t testing.TB) string {
	u := config.RedisURL.Value()
	requireTCP(t, "Redis", hostOf(t, u, "127.0.0.1:6379"))
	return u
}

// defaultRedisCluster is the three-master Redis Cluster of deploy/local/stack.sh.
const defaultRedisCluster = "redis://127.0.0.1:17001,redis://127.0.0.1:17002,redis://127.0.0.1:17003"

// RedisClusterURL returns the seed URLs of the test Redis Cluster
// (SP_TEST_REDIS_CLUSTER_URL, default the stack's three masters on
// 17001-17003), in SP_REDIS_URL's comma-separated form, skipping loudly when
// its first node does not answer.
func RedisClusterURL(t testing.TB) string {
	u := envOr("SP_TEST_REDIS_CLUSTER_URL", defaultRedisCluster)
	requireTCP(t, "Redis Cluster", hostOf(t, strings.Split(u, ",")[0], "127.0.0.1:17001"))
	return u
}

// KafkaBrokers returns the real broker of the local stack (SP_TEST_KAFKA_BROKERS,
// default 127.0.0.1:19092), skipping loudly when absent. It is never kfake.
func KafkaBrokers(t testing.TB) []string {
	b := envOr("SP_TEST_KAFKA_BROKERS", defaultKafka)
	brokers := strings.Split(b, ",")
	requireTCP(t, "Kafka", brokers[0])
	return brokers
}

// WithDatabase rewrites a PostgreSQL URL to name another database.
func WithDatabase(t testing.TB, pgURL, db string) string {
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatalf("parsing PostgreSQL URL: %v", err)
	}
	u.Path = "/" + db
	return u.String()
}

// RepoRoot is the module's root directory.
func RepoRoot(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate testenv source")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary builds cmd/speculapro once per test process and returns its path,
// or returns SP_TEST_BINARY's path when set: make test hands over the binary
// its build step has just made, rather than linking another.
func Binary(t testing.TB) string {
	buildOnce.Do(func() {
		if p := os.Getenv("SP_TEST_BINARY"); p != "" {
			if _, err := os.Stat(p); err != nil {
				buildErr = fmt.Errorf("SP_TEST_BINARY: %w", err)
			}
			buildPath = p
			return
		}
		dir, err := os.MkdirTemp("", "speculapro-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "speculapro")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/speculapro")
		cmd.Dir = RepoRoot(t)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/speculapro: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// FreeAddr returns a free loopback TCP address.
func FreeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func requireTCP(t testing.TB, service, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return
	}
	Unavailable(t, fmt.Sprintf("%s NOT AVAILABLE at %s (%v). Start it with `deploy/local/stack.sh up` or run `make test`.", service, addr, err))
}

// Unavailable skips the test loudly because something it needs is missing —
// or fails it under SP_TEST_REQUIRE_SERVICES=1 (make test), which installs
// and starts everything, so that nothing is ever skipped there unseen.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	msg := "\n*** " + why + " SKIPPING. ***\n"
	if os.Getenv("SP_TEST_REQUIRE_SERVICES") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func hostOf(t testing.TB, rawURL, fallback string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return fallback
	}
	if u.Port() == "" {
		return u.Host + ":" + strings.Split(fallback, ":")[1]
	}
	return u.Host
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
