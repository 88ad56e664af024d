package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// What the persister benchmarks measure besides the clock: where the
// machine's CPU went and what PostgreSQL's backends were doing.

// cpuTicks is the busy and total time of the whole machine (/proc/stat, in
// clock ticks of 10 ms).
func cpuTicks(t testing.TB) (busy, total int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatalf("reading /proc/stat: %v", err)
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]) // cpu user nice system idle iowait irq softirq steal
	for i, s := range f[1:] {
		v, _ := strconv.ParseInt(s, 10, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// commandCPU is the CPU seconds every process named comm has used, with
// its reaped children's (a PostgreSQL backend that exited is counted in the
// postmaster's): the difference of two readings is what the PostgreSQL
// server ("postgres") or the Kafka broker ("java") spent in between.
func commandCPU(comm string) float64 {
	dirs, _ := os.ReadDir("/proc")
	var ticks float64
	for _, d := range dirs {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		data, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != comm {
			continue
		}
		// After the name: utime, stime, cutime, cstime are the 12th to
		// 15th fields, in clock ticks (100 a second).
		f := strings.Fields(s[end+1:])
		for _, v := range f[11:15] {
			n, _ := strconv.ParseFloat(v, 64)
			ticks += n
		}
	}
	return ticks / 100
}

// serverCPU is the CPU seconds PostgreSQL and the Kafka broker used
// between two readings.
type serverCPU struct{ pg, broker float64 }

func readServerCPU() serverCPU { return serverCPU{commandCPU("postgres"), commandCPU("java")} }

func (a serverCPU) since(before serverCPU) serverCPU {
	return serverCPU{a.pg - before.pg, a.broker - before.broker}
}

// totalAlloc is the bytes the process's Go heap has allocated since it
// started (runtime.MemStats.TotalAlloc, from /debug/pprof/heap, which needs
// http.debug_endpoints); 0 when it cannot be read.
func totalAlloc(t testing.TB, p *binProcess) int64 {
	client := http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get("http://" + p.httpAddr + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Logf("heap profile of %s: %v", p.name, err)
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "# TotalAlloc = "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	t.Logf("heap profile of %s: no TotalAlloc", p.name)
	return 0
}

// saveAllocProfile saves p's allocation profile (every allocation since it
// started, sampled; http.debug_endpoints) to path.
func saveAllocProfile(t testing.TB, p *binProcess, path string) {
	client := http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get("http://" + p.httpAddr + "/debug/pprof/allocs")
	if err != nil {
		t.Logf("allocation profile of %s: %v", p.name, err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Logf("allocation profile of %s: status %d, %v", p.name, resp.StatusCode, err)
		return
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Logf("allocation profile of %s: %v", p.name, err)
		return
	}
	t.Logf("allocation profile of %s saved to %s (go tool pprof -sample_index=alloc_space -top %s)", p.name, path, path)
}

// waitSampler samples pg_stat_activity of one database every 50 ms while
// it runs: what each of its client backends is doing (CPU: active with no
// wait event; else the wait event), so a benchmark can say where
// PostgreSQL's side of the time went.
type waitSampler struct {
	mu      sync.Mutex
	counts  map[string]int
	stmts   map[string]int    // active backends by the statement they run
	pids    map[int32]float64 // every client backend seen: its CPU ticks before the first sample, for backendCPU
	samples int
	failed  int   // samples lost to an error
	lastErr error // the last of those errors
	stop    chan struct{}
	done    chan struct{}
}

func startWaitSampler(t testing.TB, superURL, database string) *waitSampler {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, superURL)
	if err != nil {
		t.Fatalf("wait sampler: %v", err)
	}
	w := &waitSampler{counts: map[string]int{}, stmts: map[string]int{}, pids: map[int32]float64{}, stop: make(chan struct{}), done: make(chan struct{})}
	// A failed sample is counted and the next one tried (on a new
	// connection when the old one broke): a sampler that stopped at its
	// first error (a backend still connecting has no state, which the
	// query names) would report no backends at all for the run.
	lost := func(err error) {
		w.mu.Lock()
		w.failed++
		w.lastErr = err
		w.mu.Unlock()
		if conn.IsClosed() {
			if c, err := pgx.Connect(ctx, superURL); err == nil {
				conn = c
			}
		}
	}
	go func() {
		defer close(w.done)
		defer func() { conn.Close(context.WithoutCancel(ctx)) }()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			rows, err := conn.Query(ctx, `
SELECT CASE WHEN state = 'active' AND wait_event IS NULL THEN 'CPU'
            WHEN state = 'active' THEN wait_event_type || ':' || wait_event
            ELSE 'idle: ' || coalesce(wait_event, state, 'no state') END,
       CASE WHEN state = 'active' THEN left(regexp_replace(query, '\s+', ' ', 'g'), 48) END,
       pid
  FROM pg_stat_activity
 WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()`, database)
			if err != nil {
				lost(err)
				continue
			}
			var what string
			var stmt *string
			var pid int32
			_, err = pgx.ForEachRow(rows, []any{&what, &stmt, &pid}, func() error {
				w.mu.Lock()
				w.counts[what]++
				if _, ok := w.pids[pid]; !ok {
					// A backend already there when sampling began did its
					// earlier work for someone else (set-up, seeding); one
					// that starts later is the contender's from birth.
					w.pids[pid] = 0
					if w.samples == 0 {
						w.pids[pid] = procCPUTicks(pid)
					}
				}
				if stmt != nil {
					// pg_stat_statements needs a restart of the shared
					// server to load: sampling what the active backends
					// run says where their time goes, by statement.
					w.stmts[strings.TrimSpace(*stmt)]++
				}
				w.mu.Unlock()
				return nil
			})
			if err != nil {
				lost(err)
				continue
			}
			w.mu.Lock()
			w.samples++
			w.mu.Unlock()
		}
	}()
	return w
}

// report stops the sampler and says, per state, the average number of
// backends in it ("CPU 1.62, LWLock:WALWrite 0.31, ...").
func (w *waitSampler) report() string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	lost := ""
	if w.failed > 0 {
		lost = fmt.Sprintf(" (%d samples lost, the last to: %v)", w.failed, w.lastErr)
	}
	return fmt.Sprintf("backends on average over %d samples%s: %s; active backends by statement: %s",
		w.samples, lost, w.averages(w.counts), w.averages(w.stmts))
}

// trouble says why backendCPU may be short ("" when it is not): samples
// lost, so backends may have been missed, or none seen.
func (w *waitSampler) trouble() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case len(w.pids) == 0:
		return "no database backend seen"
	case w.failed*10 > w.samples:
		return fmt.Sprintf("%d of %d samples of the backends lost", w.failed, w.samples+w.failed)
	}
	return ""
}

// backendCPU is the CPU seconds the database's client backends that the
// sampler saw have used while it ran, read from /proc while they still run
// (call it before their connections close): unlike commandCPU's sum over
// every postgres process, it holds no other database's work, so other
// tests on the shared server do not count as this contender's. It leaves
// out the server's shared processes (WAL writer, checkpointer), whose work
// for the same rows is about the same whoever wrote them.
func (w *waitSampler) backendCPU() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ticks float64
	for pid, before := range w.pids {
		ticks += max(procCPUTicks(pid)-before, 0)
	}
	return ticks / 100
}

// procCPUTicks is the utime and stime of process pid in clock ticks, 0
// when it is gone.
func procCPUTicks(pid int32) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return 0
	}
	var ticks float64
	for _, v := range f[11:13] {
		n, _ := strconv.ParseFloat(v, 64)
		ticks += n
	}
	return ticks
}

// selfCPU is the CPU seconds this test process has used (the ceiling's
// COPY client).
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// averages lists counts as average backends per sample, largest first.
func (w *waitSampler) averages(counts map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range counts {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	var parts []string
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.v)/float64(max(w.samples, 1))))
	}
	return strings.Join(parts, ", ")
}
