package tests

import (
	"context"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/backtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// BenchmarkRulesBacktest measures `rules backtest` on a stored history of
// streamBenchCount transactions (1,000,000; SP_TEST_BENCH_COUNT for a
// quick look) over 20,000 accounts of one workspace, written with COPY,
// with 12 and with 100 rules: events/s and peak memory per 10,000
// accounts, beside the live stream's events/s in the same run (stream.yaml
// on a fifth as many transactions, the same 12 rules live).
func BenchmarkRulesBacktest(b *testing.B) {
	n := streamBenchCount(b)
	testenv.Binary(b)
	s := newProofStack(b, "backtest-bench", testenv.RedisURL(b))
	cfg := loadgen.Config{Seed: uint64(time.Now().UnixNano()), Count: n, Accounts: 20000, Workspaces: 1,
		Counterparties: 5000, KnownAccountsRatio: 0.3, LinkedRatio: loadgen.DefaultLinkedRatio,
		Start: time.Now().UTC().Truncate(time.Second), Spread: 48 * time.Hour}
	g, err := loadgen.New(cfg, lgProtector(b))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	accounts := copyHistory(b, s, g, n)
	b.Logf("history of %d transactions over %d accounts written with COPY in %s", n, accounts, time.Since(start).Round(time.Millisecond))
	ws := g.Workspaces()[0]
	starter := starterRules(b)
	files := map[int]string{12: writeRules(b, starter, 12), 100: writeRules(b, starter, 100)}
	from, to := cfg.Start.Add(-cfg.Spread-2*time.Hour), cfg.Start.Add(time.Hour)

	b.ResetTimer()
	type result struct {
		rate, perTenK, cpu float64 // events/s, bytes per 10,000 accounts, CPU µs per event
		rep                *backtest.Report
	}
	results := map[int]result{}
	for _, k := range []int{12, 100} {
		load := loadAverage()
		t0 := time.Now()
		p := newBinProcess(b).start(b, map[string]string{"SP_DB_URL": s.db.AppURL}, "rules", "backtest", files[k],
			"--workspace", ws.String(), "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--format", "json")
		// At least 1,000 events/s, or it fails.
		code := p.waitExit(b, time.Duration(n/1000)*time.Second+time.Minute)
		out, errOut := p.stdout.String(), p.stderr.String()
		wall := time.Since(t0)
		if code != 0 {
			b.Fatalf("rules backtest exited %d:\n%s", code, errOut)
		}
		var rep backtest.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			b.Fatalf("reading the report: %v", err)
		}
		if rep.Events != int64(n) {
			b.Fatalf("%d events evaluated, want %d", rep.Events, n)
		}
		// The process's CPU per event: on a machine shared with other
		// work, steadier than its events/s.
		ps := p.cmd.ProcessState
		cpu := (ps.UserTime() + ps.SystemTime()).Seconds() * 1e6 / float64(rep.Replayed)
		r := result{rate: float64(rep.Replayed) / rep.Elapsed.Seconds(), perTenK: float64(rep.PeakRSS) / float64(rep.Accounts) * 1e4,
			cpu: cpu, rep: &rep}
		results[k] = r
		var hits int64
		for _, rr := range rep.Rules {
			hits += rr.Hits
		}
		b.Logf("%d rules: %d events in %s (first row after %s, process %s), %.0f events/s, %.1f µs CPU per event, peak RSS %d MiB, %d entities (%d MiB of totals), %d hits; load %s",
			k, rep.Replayed, rep.Elapsed.Round(time.Millisecond), rep.FirstRow.Round(time.Millisecond), wall.Round(time.Millisecond), r.rate, cpu, rep.PeakRSS>>20,
			rep.Entities, rep.StateBytes>>20, hits, load)
	}

	if path := os.Getenv("SP_TEST_BENCH_CPUPROFILE"); path != "" {
		profileBacktest(b, s, ws, files[12], from, to, path)
	}

	// The live stream, same machine, same run: a fifth of the history
	// through stream.yaml with the 12 rules live.
	streamN := max(n/5, 1000)
	if out, errOut, code := runBin(b, map[string]string{"SP_DB_URL": s.db.AppURL}, "rules", "apply", "--workspace", ws.String(), files[12]); code != 0 {
		b.Fatalf("rules apply exited %d:\n%s%s", code, out, errOut)
	}
	s.produceLG(b, g, event.KindTransaction, 0, streamN, 0)
	load := loadAverage()
	t0 := time.Now()
	p := s.startStream(b, "stream", streamPipeline, withBenchGOGC(nil), benchSetArgs()...)
	within := time.Duration(streamN/1000)*time.Second + 3*time.Minute
	waitStreamSent(b, p, streamN, within)
	streamRate := float64(streamN) / time.Since(t0).Seconds()
	s.waitDrained(b, p, s.group, s.prefix+"txn.ingested", streamN, within)
	stopAll(b, p)
	b.StopTimer()
	b.Logf("stream: %d events, %.0f events/s; load %s", streamN, streamRate, load)

	b.ReportMetric(results[12].rate, "events/s-12-rules")
	b.ReportMetric(results[100].rate, "events/s-100-rules")
	b.ReportMetric(streamRate, "stream-events/s")
	rows := []benchRow{}
	for _, k := range []int{12, 100} {
		r := results[k]
		rows = append(rows,
			benchRow{fmt.Sprintf("backtest events/s, %d rules, %d transactions", k, n), r.rate, "/s", fmt.Sprintf("stream %.0f/s", streamRate), r.rate / streamRate, ">= 100,000/s"},
			benchRow{fmt.Sprintf("backtest process CPU per event, %d rules", k), r.cpu, "µs", "", 0, "-"},
			benchRow{fmt.Sprintf("backtest peak RSS per 10,000 accounts, %d rules", k), r.perTenK / (1 << 20), "MB", fmt.Sprintf("%d accounts", r.rep.Accounts), 0, "-"})
	}
	logTable(b, fmt.Sprintf("rules backtest: %d transactions over %d accounts", n, accounts), rows)
}

// loadAverage is the machine's 1, 5 and 15 minute load (the machine is
// shared: a figure is read beside it).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return "?"
	}
	return string(b[:14])
}

// starterRules are the starter pack's rules (config/rules).
func starterRules(b *testing.B) []rules.Rule {
	defs := starterDefinitions(b)
	out := make([]rules.Rule, len(defs))
	for i := range defs {
		out[i] = defs[i].Rule
	}
	return out
}

// starterDefinitions are the starter pack's rule files (config/rules),
// parsed.
func starterDefinitions(b *testing.B) []rules.Definition {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(b), "config/rules/*.yaml"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no starter rules in config/rules (%v)", err)
	}
	defs, err := rules.ParseFiles(files...)
	if err != nil {
		b.Fatal(err)
	}
	return defs
}

// writeRules writes k rules to a file: the starter rules in turn, renamed
// after the first round (the same expressions, so every one costs what a
// real rule costs).
func writeRules(b *testing.B, starter []rules.Rule, k int) string {
	type doc struct {
		Name       string `yaml:"name"`
		AppliesTo  string `yaml:"applies_to"`
		Severity   string `yaml:"severity"`
		Action     string `yaml:"action"`
		Alert      bool   `yaml:"alert"`
		Score      string `yaml:"score"`
		Expression string `yaml:"expression"`
	}
	var docs []doc
	for i := range k {
		r := starter[i%len(starter)]
		name := r.Name
		if i >= len(starter) {
			name += "_" + strconv.Itoa(i/len(starter))
		}
		docs = append(docs, doc{name, string(r.AppliesTo), r.Severity, r.Action, r.Alert, r.Score, r.Expression})
	}
	out, err := yaml.Marshal(map[string]any{"rules": docs})
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), fmt.Sprintf("rules-%d.yaml", k))
	if err := os.WriteFile(path, out, 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// copyHistory writes g's first n transactions, their customers, accounts
// and counterparties into s's database with COPY, as the persister would
// store them (received_at one microsecond apart, in order), and returns
// how many accounts they touch.
func copyHistory(b *testing.B, s *proofStack, g *loadgen.Generator, n int) int {
	ctx := context.Background()
	conn := s.db.Connect(b, s.db.SystemURL)
	cfg := g.Config()
	first := cfg.Start.Add(-cfg.Spread - 2*time.Hour)
	month := time.Date(first.Year(), first.Month(), 1, 0, 0, 0, 0, time.UTC)
	if _, err := conn.Exec(ctx, "SELECT speculapro.ensure_partitions($1::date, 2)", month.Format(time.DateOnly)); err != nil {
		b.Fatal(err)
	}
	for i, ws := range g.Workspaces() {
		if _, err := conn.Exec(ctx, "INSERT INTO speculapro.workspaces (id, name) VALUES ($1, $2)", ws, fmt.Sprintf("backtest bench %d", i)); err != nil {
			b.Fatal(err)
		}
	}
	customers, accounts, cps := map[event.UUID][]string{}, map[event.UUID][]string{}, map[event.UUID][]string{}
	recv := cfg.Start.Add(-cfg.Spread)
	copyCSV(b, conn, `COPY speculapro.transactions (id, workspace_id, external_id, account_id, customer_id, counterparty_id,
 amount, currency, direction, kind, status, occurred_at, received_at, reference, counterparty_name, channel, metadata) FROM STDIN (FORMAT csv)`,
		func(w *csv.Writer) {
			for i := range n {
				e := g.Envelope(i)
				ws := e.WorkspaceID.String()
				acct, cust := event.AccountID(e.WorkspaceID, e.AccountExternalID), event.CustomerID(e.WorkspaceID, e.CustomerExternalID)
				customers[cust] = []string{cust.String(), ws, e.CustomerExternalID}
				accounts[acct] = []string{acct.String(), ws, e.AccountExternalID, cust.String()}
				cp, cpName := "", ""
				if c := e.Counterparty; c != nil {
					id := event.CounterpartyID(e.WorkspaceID, c.Fingerprint)
					fp, _ := hex.DecodeString(c.Fingerprint)
					cps[id] = []string{id.String(), ws, `\x` + hex.EncodeToString(fp), c.IdentifierKind, c.IdentifierMasked, c.Name}
					cp, cpName = id.String(), c.Name
				}
				at := recv.Add(time.Duration(i) * time.Microsecond)
				meta := string(e.Metadata)
				if meta == "" {
					meta = "{}"
				}
				_ = w.Write([]string{e.ID.String(), ws, e.ExternalID, acct.String(), cust.String(), cp, e.Amount, e.Currency,
					string(e.Direction), e.Type, e.Status, e.OccurredAt.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano),
					e.Reference, cpName, e.Channel, meta})
			}
		})
	copyRows(b, conn, "COPY speculapro.customers (id, workspace_id, external_id) FROM STDIN (FORMAT csv)", customers)
	copyRows(b, conn, "COPY speculapro.accounts (id, workspace_id, external_id, customer_id) FROM STDIN (FORMAT csv)", accounts)
	copyRows(b, conn, "COPY speculapro.counterparties (id, workspace_id, fingerprint, identifier_kind, identifier_masked, name) FROM STDIN (FORMAT csv)", cps)
	if _, err := conn.Exec(ctx, "ANALYZE speculapro.transactions"); err != nil {
		b.Fatal(err)
	}
	return len(accounts)
}

func copyRows(b *testing.B, conn *pgx.Conn, sql string, rows map[event.UUID][]string) {
	copyCSV(b, conn, sql, func(w *csv.Writer) {
		for _, r := range rows {
			_ = w.Write(r)
		}
	})
}

// copyCSV runs sql (a COPY FROM STDIN in CSV) with the rows write writes.
func copyCSV(b *testing.B, conn *pgx.Conn, sql string, write func(w *csv.Writer)) {
	pr, pw := io.Pipe()
	go func() {
		// Owned here; closing pw ends the COPY (or fails it with the error).
		w := csv.NewWriter(pw)
		write(w)
		w.Flush()
		pw.CloseWithError(w.Error())
	}()
	if _, err := conn.PgConn().CopyFrom(context.Background(), pr, sql); err != nil {
		_ = pr.CloseWithError(err)
		b.Fatalf("%s: %v", sql[:40], err)
	}
}

// profileBacktest runs the 12-rule backtest once more in this process
// with a CPU profile saved to path: what bounds its events/s.
func profileBacktest(b *testing.B, s *proofStack, ws event.UUID, file string, from, to time.Time, path string) {
	defs, err := rules.ParseFiles(file)
	if err != nil {
		b.Fatal(err)
	}
	o := backtest.Options{Workspace: ws, From: from, To: to}
	for _, d := range defs {
		o.Rules = append(o.Rules, d.Rule)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	conn := s.db.Connect(b, s.db.AppURL)
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	rep, err := backtest.Run(context.Background(), conn, o)
	pprof.StopCPUProfile()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("profiled: %d events in %s, CPU profile in %s", rep.Replayed, rep.Elapsed.Round(time.Millisecond), path)
}
