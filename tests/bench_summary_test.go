package tests

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// benchSummaryEnv names the file make bench collects the summary rows in; a
// benchmark run without it (go test -bench directly) only logs its rows.
const benchSummaryEnv = "SP_TEST_BENCH_SUMMARY"

var benchSummaryMu sync.Mutex

// benchSummary adds one row to the table `make bench` prints at the end and
// writes into docs/benchmarks.md (see the Makefile's bench target): metric
// says what was measured and how much of it ("persister rows/s, 1M rows"),
// value the figure, baseline what it is compared with in the same run
// ("raw COPY 98.1k rows/s"), ratio the two's quotient and aim the figure
// the product aims for ("≥ 0.80"); any of baseline, ratio and aim may be "". A metric
// reported twice keeps its last row. Every benchmark calls it once per
// figure, after its measurement:
//
//	benchSummary(b, "stream events/s", fmt.Sprintf("%.0f", rate), "persister "+…, fmt.Sprintf("%.2f", r), "≥ 1.0")
func benchSummary(b testing.TB, metric, value, baseline, ratio, aim string) {
	b.Helper()
	clean := func(s string) string { return strings.NewReplacer("\t", " ", "\n", " ", "|", "/").Replace(s) }
	line := strings.Join([]string{clean(metric), clean(value), clean(baseline), clean(ratio), clean(aim)}, "\t")
	b.Logf("summary: %s", strings.ReplaceAll(line, "\t", " | "))
	path := os.Getenv(benchSummaryEnv)
	if path == "" {
		return
	}
	benchSummaryMu.Lock()
	defer benchSummaryMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.Errorf("bench summary: opening %s: %v", path, err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		b.Errorf("bench summary: writing %s: %v", path, err)
	}
}

// ratioOf formats value/baseline for a summary row.
func ratioOf(value, baseline float64) string {
	if baseline == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", value/baseline)
}
