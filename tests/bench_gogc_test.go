package tests

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// withBenchGOGC adds SP_TEST_BENCH_GOGC, SP_TEST_BENCH_GOMEMLIMIT and
// SP_TEST_BENCH_GODEBUG, when set, to env as the measured process's GOGC,
// GOMEMLIMIT and GODEBUG. Setting them on
// `go test` itself would also change the collector of the benchmark's own
// clients and baselines, which share the two cores with the process being
// measured; this reaches only the latter.
func withBenchGOGC(env map[string]string) map[string]string {
	for from, to := range map[string]string{"SP_TEST_BENCH_GOGC": "GOGC", "SP_TEST_BENCH_GOMEMLIMIT": "GOMEMLIMIT", "SP_TEST_BENCH_GODEBUG": "GODEBUG"} {
		if v := os.Getenv(from); v != "" {
			if env == nil {
				env = map[string]string{}
			}
			env[to] = v
		}
	}
	return env
}

// benchSetArgs turns SP_TEST_BENCH_SET="path=value path=value" into --set
// arguments, to measure a pipeline setting before it becomes a default
// (e.g. input.kafka_franz.max_buffered_records=20000).
func benchSetArgs() []string {
	var args []string
	for _, kv := range strings.Fields(os.Getenv("SP_TEST_BENCH_SET")) {
		args = append(args, "--set", kv)
	}
	return args
}

// benchCount is n, or SP_TEST_BENCH_COUNT when it is set: a smaller run
// for a quick look while iterating.
func benchCount(b *testing.B, n int) int {
	v := os.Getenv("SP_TEST_BENCH_COUNT")
	if v == "" {
		return n
	}
	c, err := strconv.Atoi(v)
	if err != nil || c < 1 {
		b.Fatalf("SP_TEST_BENCH_COUNT=%q: want a whole number of at least 1", v)
	}
	return c
}
