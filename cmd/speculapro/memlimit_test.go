package main

import (
	"math"
	"os"
	"runtime/debug"
	"testing"
)

func TestDefaultMemoryLimitOnlyWithoutGOMEMLIMIT(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "512MiB") // the runtime read it at start-up; ours must not replace it
	setMemoryLimit([]string{"run", "pipelines/persist.yaml"})
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set the limit became %d", got)
	}

	t.Setenv("GOMEMLIMIT", "")
	unsetenv(t, "GOMEMLIMIT")
	setMemoryLimit([]string{"run", "pipelines/persist.yaml"})
	if got := debug.SetMemoryLimit(-1); got != defaultMemoryLimit {
		t.Errorf("without GOMEMLIMIT the limit is %d, want %d", got, defaultMemoryLimit)
	}
}

// unsetenv removes name for the rest of the test (t.Setenv restores it).
func unsetenv(t *testing.T, name string) {
	t.Helper()
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

func TestStreamGetsItsOwnMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"run", "pipelines/stream.yaml"}, true},
		{[]string{"run", "/etc/speculapro/stream-events.yaml"}, true},
		{[]string{"streams", "-o", "config/observability.yaml", "pipelines/persist.yaml", "pipelines/stream.yaml"}, true},
		{[]string{"dev"}, true},
		{[]string{"run", "pipelines/persist.yaml"}, false},
		{[]string{"run", "pipelines/ingest.yaml"}, false},
		{[]string{"rules", "test", "config/rules/velocity.yaml"}, false},
		{nil, false},
	} {
		if got := runsStream(tc.args); got != tc.want {
			t.Errorf("runsStream(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}

	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	debug.SetMemoryLimit(math.MaxInt64)
	unsetenv(t, "GOMEMLIMIT")
	setMemoryLimit([]string{"run", "pipelines/stream.yaml"})
	if got := debug.SetMemoryLimit(-1); got != streamMemoryLimit {
		t.Errorf("the stream's soft memory limit is %d, want %d", got, streamMemoryLimit)
	}
}

// The stream's limit stays streamLiveHeadroom above the live heap once the
// live heap outgrows streamMemoryLimit, so the collector never runs
// continuously.
func TestStreamLimitFollowsTheLiveHeap(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int64
	}{
		{0, streamMemoryLimit},
		{200 << 20, streamMemoryLimit},
		{300 << 20, 450 << 20},
		{1 << 30, 1536 << 20},
	} {
		if got := streamLimitFor(tc.live); got != tc.want {
			t.Errorf("streamLimitFor(%d MiB) = %d MiB, want %d MiB", tc.live>>20, got>>20, tc.want>>20)
		}
	}
}

// The ingest role collects at GOGC 200 unless GOGC is set; every other role
// keeps Go's 100.
func TestIngestGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(limit) })
	unsetenv(t, "GOGC")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"run", "pipelines/ingest.yaml"}, ingestGCPercent},
		{[]string{"run", "pipelines/persist.yaml"}, 100},
		{[]string{"streams", "pipelines/ingest.yaml", "pipelines/stream.yaml"}, 100},
		{[]string{"dev"}, 100},
	} {
		debug.SetGCPercent(100)
		setMemoryLimit(tc.args)
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("%q: GOGC %d, want %d", tc.args, got, tc.want)
		}
	}
	t.Setenv("GOGC", "100")
	setMemoryLimit([]string{"run", "pipelines/ingest.yaml"})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set the ingest role's GOGC became %d", got)
	}
}
