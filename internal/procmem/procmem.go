package procmem

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// DefaultLimit is the soft memory limit of a process until a pipeline
// states one (a command that runs no pipeline keeps it): 150 MiB of
// Go-managed memory keeps a role's resident set under 200 MB, because the
// collector runs earlier as the heap nears it instead of letting it grow to
// twice the live data (GOGC=100).
const DefaultLimit = 150 << 20

// Field names of the process_memory object.
const (
	FieldProcessMemory    = "process_memory"
	fieldLimit            = "limit"
	fieldLiveHeapHeadroom = "live_heap_headroom"
	fieldGCPercent        = "gc_percent"
)

// Settings are what one pipeline asks of the process's memory.
type Settings struct {
	// Limit is the soft memory limit in bytes; 0 has no say.
	Limit int64
	// LiveHeapHeadroom, above 0, keeps the limit at least this ratio above
	// the live heap, followed every second, so a process whose live data
	// outgrows Limit collects as often as GOGC=100×(ratio−1) would, not
	// continuously.
	LiveHeapHeadroom float64
	// GCPercent is GOGC; 0 has no say.
	GCPercent int
}

// Field is the process_memory field every input of ours carries: the role
// states its settings where its pipeline is configured.
func Field() *service.ConfigField {
	return service.NewObjectField(FieldProcessMemory,
		service.NewStringField(fieldLimit).
			Description("The Go runtime's soft memory limit, in GOMEMLIMIT's form (`150MiB`); empty has no say. A process that runs several pipelines takes the largest.").
			Example("300MiB").
			Default(""),
		service.NewFloatField(fieldLiveHeapHeadroom).
			Description("Above 0, the limit stays at least this ratio above the live heap, followed every second, so live data that outgrows `limit` does not make the collector run continuously.").
			Default(0.0),
		service.NewIntField(fieldGCPercent).
			Description("The collector's GOGC; 0 has no say. A process that runs several pipelines takes the lowest stated.").
			Default(0),
	).
		Description("The Go memory settings of the process that runs this pipeline, applied when the input is built. `GOMEMLIMIT` and `GOGC` in the environment replace them. Without any, a process runs under a " + humanize.IBytes(DefaultLimit) + " soft limit at GOGC 100.").
		Advanced().
		Optional()
}

// FromParsed applies the input's process_memory field, when it has one.
func FromParsed(conf *service.ParsedConfig) error {
	if !conf.Contains(FieldProcessMemory) {
		return nil
	}
	pc := conf.Namespace(FieldProcessMemory)
	var s Settings
	limit, err := pc.FieldString(fieldLimit)
	if err != nil {
		return err
	}
	if limit != "" {
		n, err := humanize.ParseBytes(limit)
		if err != nil || n > math.MaxInt64 {
			return fmt.Errorf("%s.%s: %q is not a size such as 300MiB", FieldProcessMemory, fieldLimit, limit)
		}
		s.Limit = int64(n)
	}
	if s.LiveHeapHeadroom, err = pc.FieldFloat(fieldLiveHeapHeadroom); err != nil {
		return err
	}
	if s.LiveHeapHeadroom != 0 && s.LiveHeapHeadroom < 1.1 {
		return fmt.Errorf("%s.%s: %v is below 1.1: the collector would run nearly all the time", FieldProcessMemory, fieldLiveHeapHeadroom, s.LiveHeapHeadroom)
	}
	if s.GCPercent, err = pc.FieldInt(fieldGCPercent); err != nil {
		return err
	}
	if s.GCPercent < 0 {
		return fmt.Errorf("%s.%s: %d is negative", FieldProcessMemory, fieldGCPercent, s.GCPercent)
	}
	Request(s)
	return nil
}

// process is what the pipelines of this process asked for, merged.
var process struct {
	mu        sync.Mutex
	asked     Settings
	following bool // followLiveHeap runs
}

// Start applies DefaultLimit unless GOMEMLIMIT is set; the binary calls it
// first thing, so every command runs under a limit.
func Start() {
	if !inEnvironment("GOMEMLIMIT") {
		debug.SetMemoryLimit(DefaultLimit)
	}
}

// Request merges one pipeline's settings into the process's and applies the
// result: the largest limit, the largest headroom, the lowest GOGC stated.
// GOMEMLIMIT and GOGC in the environment win.
func Request(s Settings) {
	process.mu.Lock()
	defer process.mu.Unlock()
	a := &process.asked
	a.Limit = max(a.Limit, s.Limit)
	a.LiveHeapHeadroom = max(a.LiveHeapHeadroom, s.LiveHeapHeadroom)
	if s.GCPercent > 0 && (a.GCPercent == 0 || s.GCPercent < a.GCPercent) {
		a.GCPercent = s.GCPercent
	}
	if !inEnvironment("GOGC") && a.GCPercent > 0 {
		debug.SetGCPercent(a.GCPercent)
	}
	if inEnvironment("GOMEMLIMIT") || a.Limit == 0 {
		return
	}
	debug.SetMemoryLimit(limitFor(*a, liveHeap()))
	if a.LiveHeapHeadroom > 0 && !process.following {
		process.following = true
		go followLiveHeap(time.Second)
	}
}

// inEnvironment reports whether the runtime took the variable from the
// environment at start: set and not empty, as the runtime reads it.
func inEnvironment(name string) bool { return os.Getenv(name) != "" }

// limitFor is the soft memory limit for a live heap of live bytes: the
// limit asked for, or the headroom times the live heap when that is more.
func limitFor(s Settings, live uint64) int64 {
	return max(s.Limit, int64(float64(live)*s.LiveHeapHeadroom))
}

// liveHeap is the runtime's live heap as of the last collection, 0 on a
// runtime without the metric.
func liveHeap() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// followLiveHeap raises (and lowers again, never below the limit asked for)
// the soft memory limit with the live heap, every interval, for the life of
// the process. A change under a sixteenth is left alone.
func followLiveHeap(interval time.Duration) {
	for range time.Tick(interval) {
		process.mu.Lock()
		if process.asked.Limit == 0 || inEnvironment("GOMEMLIMIT") {
			process.mu.Unlock()
			continue
		}
		current := debug.SetMemoryLimit(-1)
		limit := limitFor(process.asked, liveHeap())
		if d := limit - current; d > current/16 || -d > current/16 {
			debug.SetMemoryLimit(limit)
		}
		process.mu.Unlock()
	}
}
