package tests

import (
	"os"
	"strings"
)

// withBenchGOGC adds SP_TEST_BENCH_GOGC and SP_TEST_BENCH_GOMEMLIMIT, when
// set, to env as the measured process's GOGC and GOMEMLIMIT. Setting them on
// `go test` itself would also change the collector of the benchmark's own
// clients and baselines, which share the two cores with the process being
// measured; this reaches only the latter.
func withBenchGOGC(env map[string]string) map[string]string {
	for from, to := range map[string]string{"SP_TEST_BENCH_GOGC": "GOGC", "SP_TEST_BENCH_GOMEMLIMIT": "GOMEMLIMIT"} {
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
