package tests

import "os"

// withBenchGOGC adds SP_TEST_BENCH_GOGC, when set, to env as the measured
// process's GOGC. Setting GOGC on `go test` itself would also change the
// collector of the benchmark's own clients and baselines, which share the
// two cores with the process being measured; this reaches only the latter.
func withBenchGOGC(env map[string]string) map[string]string {
	if v := os.Getenv("SP_TEST_BENCH_GOGC"); v != "" {
		if env == nil {
			env = map[string]string{}
		}
		env["GOGC"] = v
	}
	return env
}
