package procmem

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// isolate gives the test a process with no pipeline's request yet, no
// GOMEMLIMIT or GOGC in its environment, and puts the runtime's settings
// back afterwards.
func isolate(t *testing.T) {
	limit, gogc := debug.SetMemoryLimit(-1), debug.SetGCPercent(100)
	debug.SetGCPercent(gogc)
	t.Cleanup(func() {
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(gogc)
		process.mu.Lock()
		process.asked = Settings{}
		process.mu.Unlock()
	})
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "")
	process.mu.Lock()
	process.asked = Settings{}
	process.mu.Unlock()
}

// parse builds the settings of a process_memory YAML object.
func parse(t *testing.T, yaml string) error {
	t.Helper()
	conf, err := service.NewConfigSpec().Field(Field()).ParseYAML(yaml, nil)
	if err != nil {
		t.Fatalf("parsing %q: %v", yaml, err)
	}
	return FromParsed(conf)
}

func TestStartAppliesTheDefaultUnlessGOMEMLIMIT(t *testing.T) {
	isolate(t)
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "512MiB") // the runtime read it at start-up; ours must not replace it
	Start()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set the limit became %d", got)
	}
	t.Setenv("GOMEMLIMIT", "")
	Start()
	if got := debug.SetMemoryLimit(-1); got != DefaultLimit {
		t.Errorf("without GOMEMLIMIT the limit is %d, want %d", got, DefaultLimit)
	}
}

// A pipeline's process_memory sets the limit and GOGC; a process that runs
// several takes the largest limit and the lowest GOGC stated, whatever the
// order the pipelines are built in.
func TestPipelinesStateTheProcessMemory(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pipelines []string
		limit     int64
		gogc      int
	}{
		{"persist", []string{`process_memory: {limit: 150MiB}`}, 150 << 20, 100},
		{"ingest", []string{`process_memory: {limit: 150MiB, gc_percent: 300}`}, 150 << 20, 300},
		{"stream", []string{`process_memory: {limit: 300MiB, live_heap_headroom: 1.5, gc_percent: 100}`}, 300 << 20, 100},
		{"ingest and persist", []string{`process_memory: {limit: 150MiB, gc_percent: 300}`, `process_memory: {limit: 150MiB}`}, 150 << 20, 300},
		{"ingest and stream", []string{`process_memory: {limit: 150MiB, gc_percent: 300}`, `process_memory: {limit: 300MiB, gc_percent: 100}`}, 300 << 20, 100},
		{"stream and ingest", []string{`process_memory: {limit: 300MiB, gc_percent: 100}`, `process_memory: {limit: 150MiB, gc_percent: 300}`}, 300 << 20, 100},
		{"no field", []string{``}, DefaultLimit, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isolate(t)
			Start()
			for _, p := range tc.pipelines {
				if err := parse(t, p); err != nil {
					t.Fatal(err)
				}
			}
			if got := debug.SetMemoryLimit(-1); got != tc.limit {
				t.Errorf("limit %d MiB, want %d MiB", got>>20, tc.limit>>20)
			}
			if got := debug.SetGCPercent(100); got != tc.gogc {
				t.Errorf("GOGC %d, want %d", got, tc.gogc)
			}
		})
	}
}

// GOMEMLIMIT and GOGC in the environment win over every pipeline.
func TestEnvironmentReplacesThePipelines(t *testing.T) {
	isolate(t)
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "1GiB")
	t.Setenv("GOGC", "100")
	if err := parse(t, `process_memory: {limit: 300MiB, live_heap_headroom: 1.5, gc_percent: 300}`); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set the limit became %d", got)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set GOGC became %d", got)
	}
}

func TestRefusesSettingsThatCannotWork(t *testing.T) {
	isolate(t)
	for _, yaml := range []string{
		`process_memory: {limit: lots}`,
		`process_memory: {live_heap_headroom: 1.05}`,
		`process_memory: {gc_percent: -1}`,
	} {
		if err := parse(t, yaml); err == nil {
			t.Errorf("%s was accepted", yaml)
		}
	}
}

// The limit stays the headroom above the live heap once the live heap
// outgrows the limit asked for, so the collector never runs continuously.
func TestLimitFollowsTheLiveHeap(t *testing.T) {
	s := Settings{Limit: 300 << 20, LiveHeapHeadroom: 1.5}
	for _, tc := range []struct {
		live uint64
		want int64
	}{
		{0, 300 << 20},
		{200 << 20, 300 << 20},
		{300 << 20, 450 << 20},
		{1 << 30, 1536 << 20},
	} {
		if got := limitFor(s, tc.live); got != tc.want {
			t.Errorf("limitFor(%d MiB) = %d MiB, want %d MiB", tc.live>>20, got>>20, tc.want>>20)
		}
	}
	if got := limitFor(Settings{Limit: 150 << 20}, 1<<30); got != 150<<20 {
		t.Errorf("without headroom the limit moved to %d MiB", got>>20)
	}
}
