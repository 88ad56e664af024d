package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"time"
)

// defaultMemoryLimit is the Go runtime's soft memory limit when GOMEMLIMIT is
// not set and the command runs no stream role: 150 MiB of Go-managed memory
// keeps the persist, ingest, worker and decision roles' resident set under
// 200 MB at full speed (the rest is the
// binary's own pages and the runtime's), because the collector runs earlier
// when the heap nears it instead of letting it grow to twice the live data
// (GOGC=100). GOMEMLIMIT (for example GOMEMLIMIT=512MiB, or "off") replaces it.
const defaultMemoryLimit = 150 << 20

// setMemoryLimit applies defaultMemoryLimit unless GOMEMLIMIT is set (the
// runtime has applied that one already); a command that runs the stream
// role gets the stream's own limit instead (streamMemoryLimit).
func setMemoryLimit(args []string) {
	if runsIngest(args) {
		if _, ok := os.LookupEnv("GOGC"); !ok {
			debug.SetGCPercent(ingestGCPercent)
		}
	}
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return
	}
	if runsStream(args) {
		debug.SetMemoryLimit(streamLimitFor(0))
		following.Do(func() { go followLiveHeap(time.Second) })
		return
	}
	debug.SetMemoryLimit(defaultMemoryLimit)
}

// streamMemoryLimit is the soft memory limit of a process that runs the
// stream role (and `speculapro dev`, which runs it beside the others). The
// stream's live data, its running-totals cache (128 MiB by default as
// estimated, nearly all of it values) and the records in flight, is larger
// than the other roles' 150 MiB: about 215 MB of live heap at 1M events,
// about 85 MB of it the cache. With Go's default alone the heap grows to
// twice the live data. Since the cache keeps values, which hold no pointers,
// the collector's marking is cheap and the limit can sit close to the live
// heap: at 1M events (BenchmarkStreamThroughput, runs alternated with
// SP_TEST_BENCH_GOMEMLIMIT) 300 MiB gives a peak RSS of about 340 MB for the
// CPU per event of 400 MiB (32-38 µs), which peaks at about 430 MB, while
// 275 MiB (1.3 times the live heap) costs about a fifth more CPU per event,
// and 250 MiB as much. Below about 1.4 times the live heap the collector runs
// nearly all the time, which streamLiveHeadroom guards: with it following
// the live heap, this limit's runs peak at 340-400 MB.
// docs/design/performance.md ("The stream's memory limit") gives the
// figures and the command that reproduces them.
const streamMemoryLimit = 300 << 20

// streamLiveHeadroom is how far above the live heap the stream's limit
// stays whatever streamMemoryLimit says, as a ratio: a process whose live
// data outgrows the limit (a larger cache_bytes, larger batches, several
// pipelines in one process) then collects as often as GOGC=50 would, not
// continuously.
const streamLiveHeadroom = 1.5

// streamLimitFor is the stream's soft memory limit for a live heap of live
// bytes: streamMemoryLimit, or streamLiveHeadroom times the live heap when
// that is more.
func streamLimitFor(live uint64) int64 {
	return max(streamMemoryLimit, int64(float64(live)*streamLiveHeadroom))
}

// following starts followLiveHeap once per process.
var following sync.Once

// followLiveHeap raises (and lowers again, never below streamMemoryLimit)
// the soft memory limit with the live heap, every interval, for the life of
// the process. The live heap is the runtime's own figure as of the last
// collection; a change under a sixteenth is left alone.
func followLiveHeap(interval time.Duration) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := streamLimitFor(0)
	for range time.Tick(interval) {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return // a runtime without the metric: the fixed limit stays
		}
		limit := streamLimitFor(sample[0].Value.Uint64())
		if d := limit - current; d > current/16 || -d > current/16 {
			debug.SetMemoryLimit(limit)
			current = limit
		}
	}
}

// ingestGCPercent is the ingest role's GOGC when GOGC is not set. Its live
// heap is small (the requests in flight, about 40 MB at 16 × 500 items), so
// at Go's 100 it collects 20 times a second, a fifth of its CPU. A higher
// GOGC lets the heap grow to a multiple of the live data, still under the
// soft memory limit, which makes the collector run earlier near it; since
// at most max_active_requests requests hold their items decoded, 300 fits:
// at 16 clients × 500-item requests (BenchmarkIngestThroughput, runs
// alternated with SP_TEST_BENCH_GOGC) it costs about 12 µs of CPU per item
// against 13-15 at 200 and 15 at Go's 100, at a peak RSS of about 150 MB
// (aim ≤ 200 MB; docs/design/performance.md, "The ingest role's GOGC").
const ingestGCPercent = 300

// runsIngest reports whether the command line runs the ingest role alone:
// a pipeline file named ingest*.yaml, and no stream role beside it.
func runsIngest(args []string) bool {
	if runsStream(args) {
		return false
	}
	for _, a := range args {
		if isPipelineOf(a, "ingest") {
			return true
		}
	}
	return false
}

// runsStream reports whether the command line runs the stream role: `dev`,
// or a pipeline file named stream*.yaml.
func runsStream(args []string) bool {
	for i, a := range args {
		if i == 0 && a == "dev" {
			return true
		}
		if isPipelineOf(a, "stream") {
			return true
		}
	}
	return false
}

// isPipelineOf reports whether the argument a is a pipeline file of the
// role: its name starts with the role and it ends in .yaml or .yml.
func isPipelineOf(a, role string) bool {
	return strings.HasPrefix(filepath.Base(a), role) && (strings.HasSuffix(a, ".yaml") || strings.HasSuffix(a, ".yml"))
}
