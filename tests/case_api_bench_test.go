package tests

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/plugins/caseapi"
)

// caseBenchRate is the request rate each read is measured at.
const caseBenchRate = 200

// BenchmarkCaseAPIReads: p99 of the two reads analysts make most, each at
// 200 requests/s through real HTTP with a real key, in a workspace of
// 200,000 cases holding 1,000,000 alerts (SP_TEST_SCALE=full; 40,000 cases
// and 200,000 alerts otherwise): a page of 50 open cases (half the first
// page, half a page deep in the list, from a cursor), and one case with its
// alerts, their rule hits and its timeline. The baseline, in the same run
// at the same rate, is /readyz: one HTTP round trip and one PostgreSQL
// ping; the three take 5 s turns. The seeded tables are vacuumed and
// analysed first. The plans of the queries (EXPLAIN ANALYZE, BUFFERS) are
// logged; SP_TEST_BENCH_CASE_PROBE=1 also logs what PostgreSQL and the
// machine did meanwhile (caseReadProbe).
func BenchmarkCaseAPIReads(b *testing.B) {
	cases, seconds := 40000, 10
	if fullScale() {
		cases, seconds = 200000, 30
	}
	const alertsPerCase = 5
	db := dbtest.New(b)
	sys := db.Connect(b, db.SystemURL)
	created := ingestCLI(b, db.AppURL, "workspace", "create", "--name", "case bench")
	ws, err := event.ParseUUID(created["workspace_id"])
	if err != nil {
		b.Fatalf("workspace create printed %v", created)
	}
	key := ingestCLI(b, db.AppURL, "apikey", "create", "--workspace", ws.String(), "--scopes", "cases")["api_key"]
	start := time.Now()
	seedCases(b, sys, ws, cases, alertsPerCase)
	// VACUUM (ANALYZE) and a checkpoint, as the owner (VACUUM skips, with
	// a warning only, a table its role does not own), as an operator's
	// database is: its tables grow batch by batch and autovacuum keeps up,
	// never a million rows written seconds before the reads. Without it the
	// first vacuum of the fresh rows and the backends writing out the pages
	// whose hint bits they set run during the measurement
	// (SP_TEST_BENCH_CASE_PROBE shows them).
	owner := db.Connect(b, db.OwnerURL)
	if _, err := owner.Exec(context.Background(), `VACUUM (ANALYZE) speculapro.cases, speculapro.alerts, speculapro.rule_hits, speculapro.case_events`); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Connect(b, db.SuperuserURL).Exec(context.Background(), `CHECKPOINT`); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d cases, %d alerts in %v", cases, cases*alertsPerCase, time.Since(start).Round(time.Second))

	// Cases to read and cursors to page from, drawn from the whole list.
	rows, err := sys.Query(context.Background(), `SELECT id, opened_at FROM speculapro.cases WHERE workspace_id = $1 AND status = 'open' ORDER BY random() LIMIT 1000`, ws)
	if err != nil {
		b.Fatal(err)
	}
	type sampled struct {
		id     event.UUID
		opened time.Time
	}
	sample, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sampled, error) {
		var s sampled
		return s, r.Scan(&s.id, &s.opened)
	})
	if err != nil || len(sample) == 0 {
		b.Fatalf("sampling cases: %d, %v", len(sample), err)
	}
	explainCaseReads(b, db, ws, sample[0].id)
	probe := newCaseReadProbe(b, db)
	// A cursor as the API gives it: the case the previous page ended with.
	cursors := make([]string, len(sample))
	addr := testenv.FreeAddr(b)
	api := newBinProcess(b).named("cases")
	apiEnv := map[string]string{"SP_DB_URL": db.AppURL, "SP_CASE_ADDR": addr}
	if probe != nil {
		apiEnv["GODEBUG"] = "gctrace=1"
	}
	api.start(b, apiEnv, api.runArgs("pipelines/cases.yaml")...)
	base := "http://" + addr
	if probe != nil {
		probe.healthURL = base + "/healthz"
	}
	waitUntil(b, waitBound, "the case API", func() error {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %d", resp.StatusCode)
		}
		return nil
	})
	for i, s := range sample {
		a := caseCall(b, http.MethodGet, fmt.Sprintf("%s/v1/cases?status=open&limit=1&opened_to=%s", base, s.opened.Add(time.Microsecond).UTC().Format(time.RFC3339Nano)), key, "", "", nil)
		cursors[i], _ = a.body["next_cursor"].(string)
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	get := func(url string) error {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
		}
		return nil
	}
	// The three are measured in turns of 5 s, round and round, so that a
	// change in the shared machine's load falls on all three alike.
	const turn = 5 * time.Second
	var ready, list, one []time.Duration
	b.ResetTimer()
	probe.start(b, time.Duration(3*seconds)*time.Second)
	for range seconds / int(turn.Seconds()) {
		ready = append(ready, atRate(b, turn, func(int) error { return get(base + "/readyz") })...)
		list = append(list, atRate(b, turn, func(i int) error {
			if i%2 == 0 {
				return get(base + "/v1/cases?status=open&limit=50")
			}
			return get(base + "/v1/cases?status=open&limit=50&cursor=" + cursors[rand.IntN(len(cursors))])
		})...)
		one = append(one, atRate(b, turn, func(int) error { return get(base + "/v1/cases/" + sample[rand.IntN(len(sample))].id.String()) })...)
	}
	probe.report(b)
	probe.reportProcess(b, api)
	b.StopTimer()
	scale := fmt.Sprintf("%dk cases, %dk alerts, %d req/s", cases/1000, cases*alertsPerCase/1000, caseBenchRate)
	base99 := quantileOf(ready, 0.99)
	for _, r := range []struct {
		what, unit string
		ls         []time.Duration
	}{{"case API list page of 50 open cases p99", "list-p99-ms", list}, {"case API one case with alerts and hits p99", "case-p99-ms", one}} {
		p99 := quantileOf(r.ls, 0.99)
		b.ReportMetric(float64(p99.Microseconds())/1000, r.unit)
		benchSummary(b, fmt.Sprintf("%s (%s)", r.what, scale), fmt.Sprintf("%.1f ms", float64(p99.Microseconds())/1000),
			fmt.Sprintf("/readyz p99 %.1f ms", float64(base99.Microseconds())/1000),
			ratioOf(float64(p99), float64(base99)), "≤ 50 ms")
		b.Logf("%s: p50 %v p99 %v max %v over %d requests", r.what, quantileOf(r.ls, 0.5), p99, quantileOf(r.ls, 1), len(r.ls))
	}
}

// atRate sends requests at caseBenchRate a second for dur, each on its
// schedule whatever the previous did (an open loop: a slow answer does not
// slow the load), and returns each one's latency from when it was due.
func atRate(b *testing.B, dur time.Duration, do func(i int) error) []time.Duration {
	b.Helper()
	n := int(dur.Seconds() * caseBenchRate)
	every := time.Second / caseBenchRate
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	begin := time.Now()
	for i := range n {
		due := begin.Add(time.Duration(i) * every)
		time.Sleep(time.Until(due))
		wg.Add(1)
		// Each request's goroutine ends with its answer (the client's
		// timeout bounds it); wg waits for all before returning.
		go func() {
			defer wg.Done()
			err := do(i)
			lat[i] = time.Since(due)
			if err != nil {
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		b.Fatalf("%d of %d requests failed, the first: %v", len(failures), n, failures[0])
	}
	return lat
}

// explainCaseReads logs the plans of the reads as the API runs them, in a
// session of the app role bound to ws.
func explainCaseReads(b *testing.B, db *dbtest.DB, ws, id event.UUID) {
	b.Helper()
	conn := db.Connect(b, db.AppURL)
	ctx := context.Background()
	for _, q := range caseapi.ReadQueries(ws, id, 50) {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('speculapro.workspace_id', $1, true)`, ws.String()); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q.SQL, q.Args...)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			b.Logf("plan of %s:\n%s", q.Name, strings.Join(lines, "\n"))
			return nil
		})
		if err != nil {
			b.Fatalf("explaining %s: %v", q.Name, err)
		}
	}
}
