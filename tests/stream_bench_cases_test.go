package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
)

// streamBenchCasesEnv asks BenchmarkStreamThroughput for what cases cost
// the stream's alert creation instead of its usual rows.
const streamBenchCasesEnv = "SP_TEST_BENCH_CASES"

// streamBenchCasesCount is the pre-filled topic's size in that mode
// unless SP_TEST_BENCH_COUNT says otherwise: four runs of the stream on it.
const streamBenchCasesCount = 100000

// streamBenchCases reports whether SP_TEST_BENCH_CASES asks for the
// alert-creation measurement.
func streamBenchCases() bool { return os.Getenv(streamBenchCasesEnv) != "" }

// benchStreamCases is BenchmarkStreamThroughput with SP_TEST_BENCH_CASES=1:
// alert creation in the real stream (pipelines/stream.yaml) with cases and
// without, on the same pre-filled topic (n transactions, 100,000 unless
// SP_TEST_BENCH_COUNT says otherwise), in four runs alternated with,
// without, without, with, so both sides see the same minutes of the
// machine. Besides the starter pack, every workspace has a rule that
// alerts on every transaction, so each event raises at least one alert:
// the share of the stream's work that is alert creation is as large as it
// gets. The workspaces group cases by customer (the default).
//
// "Without cases" is the same tree built with one difference: pg_rule_hits
// writes its alerts outside any case (its withoutCases switch, the
// baseline of plugins/pgrulehits' BenchmarkAlertCreation), set by a build
// overlay; the product has no setting that turns cases off. Both binaries
// are built here with the same flags. Each run has its own database
// (seeded alike), consumer group and Redis key prefix, so every run
// creates every alert afresh; each is timed from its process's start until
// its output has written every event. Reports events/s, alerts/s and time
// per alert of each side (the mean of its two runs), their ratio (aim ≤
// 1.10), the time cases add per alert, and the CPU per alert of the stream
// process and of its database backends (read from /proc at the end of each
// run): on a shared machine the steadier figure, as the wall clock moves
// with other work.
func benchStreamCases(b *testing.B) {
	n := streamBenchCasesCount
	if os.Getenv("SP_TEST_BENCH_COUNT") != "" {
		n = streamBenchCount(b)
	}
	withCases, withoutCases := buildCaseSwitchBinaries(b)
	s := newProofStack(b, "stream-bench-cases", testenv.RedisURL(b))
	g, err := loadgen.New(benchConfig(uint64(time.Now().UnixNano()), n), lgProtector(b))
	if err != nil {
		b.Fatal(err)
	}
	sum := s.produceLG(b, g, event.KindTransaction, 0, n, 0)
	b.Logf("pre-filled %s", sum)

	type side struct {
		name    string
		bin     string
		seconds float64 // summed over the side's runs
		alerts  float64
		cases   float64
		cpu     float64 // the stream process's
		dbCPU   float64 // the run database's backends' (the stream's connections)
	}
	sides := []*side{{name: "with cases", bin: withCases}, {name: "without cases", bin: withoutCases}}
	var rules int
	b.ResetTimer()
	for run, sd := range []*side{sides[0], sides[1], sides[1], sides[0]} {
		b.StopTimer()
		rs := *s
		rs.db = dbtest.New(b)
		rs.super = rs.db.Connect(b, rs.db.SuperuserURL)
		rs.group = fmt.Sprintf("%s-run%d", s.group, run)
		rs.keyPrefix = fmt.Sprintf("%srun%d:", s.keyPrefix, run) // under the stack's prefix: its cleanup deletes them
		s.own(nil, []string{rs.group})
		if _, err := loadgen.SeedKnownURL(context.Background(), rs.db.SystemURL, g); err != nil {
			b.Fatal(err)
		}
		rules = applyStarterRules(b, &rs, g.Workspaces()) + 1
		for _, ws := range g.Workspaces() {
			if _, err := rs.super.Exec(context.Background(), `INSERT INTO speculapro.rules (workspace_id, name, applies_to, expression, severity, action, alert)
VALUES ($1, 'every_transaction', 'transaction', 'event.amount >= 0', 'low', 'alert', true)`, ws); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		name := fmt.Sprintf("stream-run%d", run)
		p := newBinProcess(b).named(name).using(sd.bin).toFile(filepath.Join(b.TempDir(), name+".log"))
		start := time.Now()
		p.start(b, rs.env(withBenchGOGC(nil)), append([]string{"run", "--set", "http.address=" + p.httpAddr}, append(benchSetArgs(), streamPipeline)...)...)
		within := time.Duration(n/1000)*time.Second + 3*time.Minute
		waitStreamSent(b, p, n, within)
		took := time.Since(start).Seconds()
		b.StopTimer()
		rs.waitDrained(b, p, rs.group, s.prefix+"txn.ingested", n, within)
		sc, _ := p.scrape()
		alerts, cases := metricSum(sc, "speculapro_stream_alerts_created_total"), metricSum(sc, "speculapro_stream_cases_opened_total")
		cpu := processCPU(b, p)
		dbCPU := databaseBackendsCPU(b, rs.super, rs.db.Name)
		if code := p.signal(b, syscall.SIGTERM, time.Minute); code != 0 {
			b.Errorf("%s (%s) exited with %d on SIGTERM", name, sd.name, code)
		}
		if alerts < float64(n) {
			b.Fatalf("%s (%s) created %.0f alerts for %d transactions, want one a transaction at least", name, sd.name, alerts, n)
		}
		if (cases > 0) != (sd.bin == withCases) {
			b.Fatalf("%s (%s) opened %.0f cases", name, sd.name, cases)
		}
		b.Logf("run %d %s: %.1f s, %.0f events/s, %.0f alerts, %.0f cases opened, CPU of the stream %.1f s and of its database backends %.1f s, load %s",
			run+1, sd.name, took, float64(n)/took, alerts, cases, cpu, dbCPU, loadAverage())
		sd.seconds += took
		sd.alerts += alerts
		sd.cases += cases
		sd.cpu += cpu
		sd.dbCPU += dbCPU
		b.StartTimer()
	}
	b.StopTimer()
	with, without := sides[0], sides[1]
	perAlert := func(sd *side) float64 { return sd.seconds / sd.alerts * 1e6 }
	ratio := perAlert(with) / perAlert(without)
	b.ReportMetric(2*float64(n)/with.seconds, "events/s")
	b.ReportMetric(2*float64(n)/without.seconds, "without-cases-events/s")
	b.ReportMetric(ratio, "with/without-per-alert")
	logTable(b, fmt.Sprintf("alert creation in the stream with cases and without: %d transactions, %d rules a workspace (one alerts on every transaction), %.0f alerts a run, customer grouping, two runs a side alternated",
		n, rules, with.alerts/2), []benchRow{
		{"stream events/s with cases (every event alerts)", 2 * float64(n) / with.seconds, "/s", fmt.Sprintf("without cases %.0f/s", 2*float64(n)/without.seconds), with.seconds / without.seconds, "-"},
		{"stream alerts/s with cases", with.alerts / with.seconds, "/s", fmt.Sprintf("without cases %.0f/s", without.alerts/without.seconds), 0, "-"},
		{"stream time per alert with cases", perAlert(with), "µs", fmt.Sprintf("without cases %.1f µs", perAlert(without)), ratio, "ratio ≤ 1.10"},
		{"stream time cases add per alert", perAlert(with) - perAlert(without), "µs", "", 0, "-"},
		{"stream process CPU per alert with cases", with.cpu / with.alerts * 1e6, "µs", fmt.Sprintf("without cases %.1f µs", without.cpu/without.alerts*1e6), (with.cpu / with.alerts) / (without.cpu / without.alerts), "-"},
		{"PostgreSQL CPU per alert with cases (stream's backends)", with.dbCPU / with.alerts * 1e6, "µs", fmt.Sprintf("without cases %.1f µs", without.dbCPU/without.alerts*1e6), (with.dbCPU / with.alerts) / (without.dbCPU / without.alerts), "-"},
		{"stream and PostgreSQL CPU per alert with cases", (with.cpu + with.dbCPU) / with.alerts * 1e6, "µs", fmt.Sprintf("without cases %.1f µs", (without.cpu+without.dbCPU)/without.alerts*1e6), ((with.cpu + with.dbCPU) / with.alerts) / ((without.cpu + without.dbCPU) / without.alerts), "ratio ≤ 1.10"},
	})
}

// buildCaseSwitchBinaries builds this tree's binary twice with the same
// flags: as it is, and with pg_rule_hits writing its alerts outside any
// case (the output's constructor given withoutCases by a build overlay, so
// no file of the tree changes).
func buildCaseSwitchBinaries(b *testing.B) (withCases, withoutCases string) {
	b.Helper()
	root, dir := testenv.RepoRoot(b), b.TempDir()
	const file, anchor = "plugins/pgrulehits/output_pg_rule_hits.go", "out := &pgRuleHits{"
	src, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		b.Fatal(err)
	}
	if strings.Count(string(src), anchor) != 1 {
		b.Fatalf("%s: want %q once, where the output is made, to build the binary without cases", file, anchor)
	}
	patched := filepath.Join(dir, "output_pg_rule_hits.go")
	if err := os.WriteFile(patched, []byte(strings.Replace(string(src), anchor, anchor+"withoutCases: true, ", 1)), 0o644); err != nil {
		b.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, file): patched}})
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644); err != nil {
		b.Fatal(err)
	}
	withCases, withoutCases = filepath.Join(dir, "speculapro-cases"), filepath.Join(dir, "speculapro-without-cases")
	for _, args := range [][]string{
		{"build", "-o", withCases, "./cmd/speculapro"},
		{"build", "-overlay", filepath.Join(dir, "overlay.json"), "-o", withoutCases, "./cmd/speculapro"},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return withCases, withoutCases
}

// databaseBackendsCPU is the CPU seconds the client backends of database
// name have used (read from /proc while they run, so call it before their
// process stops): in a run's own database, the stream's connections.
func databaseBackendsCPU(b *testing.B, super *pgx.Conn, name string) float64 {
	b.Helper()
	rows, err := super.Query(context.Background(), `SELECT pid FROM pg_stat_activity
 WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()`, name)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var ticks float64
	for _, pid := range pids {
		ticks += procCPUTicks(pid)
	}
	return ticks / 100
}
