package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

// caseBenchProbeEnv asks BenchmarkCaseAPIReads to say, per phase, what
// PostgreSQL did besides answering: the statements' own times
// (pg_stat_statements, with I/O timing), buffers the API's backends had to
// write themselves (pg_stat_bgwriter), autovacuum workers and the backends'
// wait events (pg_stat_activity every 20 ms), when the slow answers came,
// and the plans of statements slower than 20 ms (auto_explain, in the
// server's log).
const caseBenchProbeEnv = "SP_TEST_BENCH_CASE_PROBE"

// caseReadProbe watches one database during BenchmarkCaseAPIReads.
type caseReadProbe struct {
	conn *pgx.Conn // the superuser on the benchmark's database
	db   string

	mu      sync.Mutex
	samples []activitySample
	stop    chan struct{}
	done    chan struct{}

	// Canaries during each phase, at 50 a second: /healthz of the same
	// process (no database), and a handler inside this test process (no
	// speculapro at all).
	healthURL       string
	canaryLat       [2][]time.Duration
	canaryWG        sync.WaitGroup
	bgBefore        bgwriterStats
	begin           time.Time
	cpuWait, ioWait float64 // /proc/pressure's "some" totals at the phase's start, µs
}

// activitySample is one active backend of the database at one instant.
type activitySample struct {
	at      time.Time
	backend string // client backend, autovacuum worker
	wait    string // CPU or the wait event
	query   string
	runMS   float64
}

// bgwriterStats are the cluster's buffer writes by who wrote them.
type bgwriterStats struct {
	checkpoint, clean, backend, checkpoints int64
}

// newCaseReadProbe turns on I/O timing and auto_explain for the
// database's new sessions (the case API's pool connects after this) and
// starts sampling; nil when the probe is not asked for.
func newCaseReadProbe(b *testing.B, db *dbtest.DB) *caseReadProbe {
	b.Helper()
	if os.Getenv(caseBenchProbeEnv) == "" {
		return nil
	}
	ctx := context.Background()
	p := &caseReadProbe{conn: db.Connect(b, db.SuperuserURL), db: db.Name, stop: make(chan struct{}), done: make(chan struct{})}
	for _, q := range []string{
		`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`,
		fmt.Sprintf(`ALTER DATABASE %q SET track_io_timing = on`, db.Name),
		fmt.Sprintf(`ALTER DATABASE %q SET session_preload_libraries = 'auto_explain'`, db.Name),
		fmt.Sprintf(`ALTER DATABASE %q SET auto_explain.log_min_duration = '20ms'`, db.Name),
		fmt.Sprintf(`ALTER DATABASE %q SET auto_explain.log_analyze = on`, db.Name),
		fmt.Sprintf(`ALTER DATABASE %q SET auto_explain.log_buffers = on`, db.Name),
		fmt.Sprintf(`ALTER DATABASE %q SET auto_explain.log_wal = on`, db.Name),
	} {
		if _, err := p.conn.Exec(ctx, q); err != nil {
			b.Fatalf("probe: %s: %v", q, err)
		}
	}
	sampler, err := pgx.Connect(ctx, db.SuperuserURL)
	if err != nil {
		b.Fatal(err)
	}
	// The sampler's goroutine ends when stop is closed (finish), which
	// b.Cleanup makes sure of.
	go func() {
		defer close(p.done)
		defer sampler.Close(context.Background())
		for p.waitTick() {
			p.sample(ctx, sampler)
		}
	}()
	b.Cleanup(p.finish)
	return p
}

// waitTick waits for the next sample, 20 ms; false once the probe is
// finished.
func (p *caseReadProbe) waitTick() bool {
	select {
	case <-p.stop:
		return false
	case <-time.After(20 * time.Millisecond):
		return true
	}
}

// sample notes what the database's active backends, and every autovacuum
// worker of the server, are doing now.
func (p *caseReadProbe) sample(ctx context.Context, conn *pgx.Conn) {
	rows, err := conn.Query(ctx, `
SELECT backend_type, coalesce(wait_event_type || ':' || wait_event, 'CPU'),
       CASE WHEN datname <> $1 THEN 'other db: ' ELSE '' END || left(regexp_replace(query, '\s+', ' ', 'g'), 60),
       coalesce(extract(epoch FROM clock_timestamp() - query_start) * 1000, 0)::float8
  FROM pg_stat_activity
 WHERE (datname = $1 OR backend_type = 'autovacuum worker') AND state = 'active' AND pid <> pg_backend_pid()`, p.db)
	if err != nil {
		return // the next tick tries again
	}
	now := time.Now()
	var s activitySample
	_, _ = pgx.ForEachRow(rows, []any{&s.backend, &s.wait, &s.query, &s.runMS}, func() error {
		s.at = now
		p.mu.Lock()
		p.samples = append(p.samples, s)
		p.mu.Unlock()
		return nil
	})
}

func (p *caseReadProbe) finish() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

func (p *caseReadProbe) bgwriter(b *testing.B) bgwriterStats {
	var s bgwriterStats
	if err := p.conn.QueryRow(context.Background(), `SELECT buffers_checkpoint, buffers_clean, buffers_backend, checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`).
		Scan(&s.checkpoint, &s.clean, &s.backend, &s.checkpoints); err != nil {
		b.Fatalf("probe: pg_stat_bgwriter: %v", err)
	}
	return s
}

// startCanaries sends the canaries until report.
func (p *caseReadProbe) startCanaries(b *testing.B, dur time.Duration) {
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	b.Cleanup(local.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	for k, url := range []string{p.healthURL, local.URL} {
		n := int(dur.Seconds() * 50)
		p.canaryLat[k] = make([]time.Duration, n)
		p.canaryWG.Add(1)
		// Ends after n requests, each bounded by the client's timeout.
		go func() {
			defer p.canaryWG.Done()
			var wg sync.WaitGroup
			for i := range n {
				due := p.begin.Add(time.Duration(i) * 20 * time.Millisecond)
				time.Sleep(time.Until(due))
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := client.Get(url)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					p.canaryLat[k][i] = time.Since(due)
				}()
			}
			wg.Wait()
		}()
	}
}

// start begins the measurement, which lasts dur: statement statistics
// reset, buffer writes noted, canaries sent.
func (p *caseReadProbe) start(b *testing.B, dur time.Duration) {
	if p == nil {
		return
	}
	if _, err := p.conn.Exec(context.Background(), `SELECT pg_stat_statements_reset()`); err != nil {
		b.Fatalf("probe: %v", err)
	}
	p.bgBefore = p.bgwriter(b)
	p.cpuWait, p.ioWait = pressureTotal("cpu"), pressureTotal("io")
	p.begin = time.Now()
	p.startCanaries(b, dur)
}

// pressureTotal is the µs some task has waited for resource (cpu, io)
// since boot (/proc/pressure), 0 where the kernel does not say.
func pressureTotal(resource string) float64 {
	data, err := os.ReadFile("/proc/pressure/" + resource)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	_, total, _ := strings.Cut(line, "total=")
	var v float64
	_, _ = fmt.Sscan(total, &v)
	return v
}

// report logs what happened during the measurement that ends now.
func (p *caseReadProbe) report(b *testing.B) {
	if p == nil {
		return
	}
	end := time.Now()
	p.canaryWG.Wait()
	after := p.bgwriter(b)
	var sb strings.Builder
	secs := end.Sub(p.begin).Seconds()
	fmt.Fprintf(&sb, "probe: some task waiting for a CPU %.0f %% of the time, for I/O %.1f %% (/proc/pressure); load %s\n",
		(pressureTotal("cpu")-p.cpuWait)/secs/1e4, (pressureTotal("io")-p.ioWait)/secs/1e4, loadAverage())
	fmt.Fprintf(&sb, "  buffers written by backends %d, by the background writer %d, by checkpoints %d (%d checkpoints)\n",
		after.backend-p.bgBefore.backend, after.clean-p.bgBefore.clean, after.checkpoint-p.bgBefore.checkpoint, after.checkpoints-p.bgBefore.checkpoints)
	rows, err := p.conn.Query(context.Background(), `
SELECT calls, mean_exec_time, max_exec_time, shared_blks_hit, shared_blks_read, shared_blks_dirtied, shared_blks_written,
       blk_read_time, blk_write_time, left(regexp_replace(query, '\s+', ' ', 'g'), 70)
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND calls >= 100
 ORDER BY total_exec_time DESC LIMIT 6`, p.db)
	if err != nil {
		b.Fatalf("probe: pg_stat_statements: %v", err)
	}
	var calls, hit, read, dirtied, written int64
	var mean, maxT, rt, wt float64
	var q string
	_, err = pgx.ForEachRow(rows, []any{&calls, &mean, &maxT, &hit, &read, &dirtied, &written, &rt, &wt, &q}, func() error {
		fmt.Fprintf(&sb, "  %6d calls mean %.3f ms max %.1f ms; blocks hit %d read %d dirtied %d written %d; read %.1f ms write %.1f ms: %s\n",
			calls, mean, maxT, hit, read, dirtied, written, rt, wt, q)
		return nil
	})
	if err != nil {
		b.Fatalf("probe: %v", err)
	}
	p.finish()
	waits := map[string]int{}
	vacuums := map[string][2]time.Duration{}
	for _, s := range p.samples {
		if s.at.Before(p.begin) || s.at.After(end) {
			continue
		}
		if s.backend != "autovacuum worker" {
			waits[s.wait]++
			continue
		}
		w, off := vacuums[s.query], s.at.Sub(p.begin)
		if w[0] == 0 || off < w[0] {
			w[0] = off
		}
		w[1] = max(w[1], off)
		vacuums[s.query] = w
	}
	fmt.Fprintf(&sb, "  the database's active client backends, samples every 20 ms: %v\n", waits)
	for q, w := range vacuums {
		fmt.Fprintf(&sb, "  %s from %.1f s to %.1f s\n", q, w[0].Seconds(), w[1].Seconds())
	}
	for k, what := range []string{"/healthz of the case API process", "a handler in the test process"} {
		l := p.canaryLat[k]
		fmt.Fprintf(&sb, "  canary %s at 50/s: p50 %v p99 %v max %v; over 50 ms at (s):", what,
			quantileOf(l, 0.5).Round(10*time.Microsecond), quantileOf(l, 0.99).Round(10*time.Microsecond), quantileOf(l, 1).Round(10*time.Microsecond))
		for i, d := range l {
			if d > 50*time.Millisecond {
				fmt.Fprintf(&sb, " %.2f:%dms", float64(i)/50, d.Milliseconds())
			}
		}
		sb.WriteString("\n")
	}
	b.Log(sb.String())
}

// reportProcess logs the case API process's own latency summary and its
// garbage collections (the probe runs it with GODEBUG=gctrace=1).
func (p *caseReadProbe) reportProcess(b *testing.B, api *binProcess) {
	if p == nil {
		return
	}
	sc, _ := api.scrape()
	b.Logf("the case API's own latency (from the request's arrival):\n%s", metricLines(sc, "speculapro_case_api_latency_ns{"))
	var gcs int
	var worst float64
	for _, l := range strings.Split(api.stderr.String(), "\n") {
		// gc N @T s P%: a+b+c ms clock, …: a and c stop the world.
		if _, rest, ok := strings.Cut(l, "%: "); ok && strings.HasPrefix(l, "gc ") {
			clock, _, _ := strings.Cut(rest, " ms clock")
			if parts := strings.Split(clock, "+"); len(parts) == 3 {
				var a, c float64
				_, _ = fmt.Sscan(parts[0], &a)
				_, _ = fmt.Sscan(parts[2], &c)
				gcs++
				worst = max(worst, a, c)
			}
		}
	}
	b.Logf("probe: the case API process ran %d collections, the longest stop of the world %.2f ms", gcs, worst)
}
