package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// defaultMemoryLimit is the Go runtime's soft memory limit when GOMEMLIMIT is
// not set: 150 MiB of Go-managed memory keeps the persist, ingest, worker and
// decision roles' resident set under 200 MB at full speed (the rest is the
// binary's own pages and the runtime's), because the collector runs earlier
// when the heap nears it instead of letting it grow to twice the live data
// (GOGC=100). GOMEMLIMIT (for example GOMEMLIMIT=512MiB, or "off") replaces it.
const defaultMemoryLimit = 150 << 20

// setMemoryLimit applies defaultMemoryLimit unless GOMEMLIMIT is set (the
// runtime has applied that one already) or the command runs the stream role.
// The stream's live data (its running-totals cache, 128 MiB by default, and
// the values of a batch's entities) is larger than the limit, and a soft
// limit below the live heap makes the collector run nearly all the time:
// measured at 100k events, 199 µs of CPU per event under the limit against
// 63 µs without it. So the stream, and `speculapro dev`, which runs it in
// the same process, keep Go's default.
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
		return
	}
	debug.SetMemoryLimit(defaultMemoryLimit)
}

// ingestGCPercent is the ingest role's GOGC when GOGC is not set. Its live
// heap is small (the requests in flight, about 40 MB at 16 × 500 items), so
// at Go's 100 it collected 20 times a second, a fifth of its CPU; at 200
// the heap may grow to three times the live data, still under the soft
// memory limit, which makes the collector run earlier near it: measured at
// 16 clients × 500-item requests, 11.7 against 15 µs of CPU per item, peak
// RSS 168 against 133 MB (aim ≤ 200 MB). Since at most max_active_requests
// requests hold their items decoded (peak RSS 120-138 MB), 300 spends that
// room: in one lock hold at 500k items, alternating with 200, 12.4 and 11.8
// against 15.2 and 12.9 µs per item, peak RSS 147-148 MB (and 12.7 against
// 13.9 µs over 8 interleaved rounds).
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
